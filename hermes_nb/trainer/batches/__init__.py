"""Where the loop's batches come from: the source contract, the replay mix, dynamic sampling."""
