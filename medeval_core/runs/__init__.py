"""Running benchmarks: the batch runner, the service every command and page calls, launching a run into a worker
process, and the workers that hold case leases."""
