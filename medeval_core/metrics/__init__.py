"""Pure metric functions; nothing here imports the rest of medeval_core."""
