"""``rl_test_inference``: run an environment's own sampling and scoring against models (the run's base model, a
checkpoint, or an OpenAI-compatible endpoint such as a hosted model) without training, and report each model's
accuracy, format failures, latency and tokens."""
