"""Training drafters on a CPU from text available offline (see data.py for the data, distill.py for the draft model)."""
