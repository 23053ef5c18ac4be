"""What a run's results become: summaries, comparisons between runs, exports, reports and their plots."""
