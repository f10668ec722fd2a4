"""The reproducibility job's fixed recipe: its data, model and optimizer sizes.

Both the job that trains (`job.py`) and the manifest that describes a run (`manifest.py`) read
them, so they live here, below both: neither module imports the other for them.
"""

IN_FEATURES = 16
HIDDEN = 64
CLASSES = 4
TRAIN_SIZE = 512
VAL_SIZE = 128
BATCH = 16
BATCHES_PER_EPOCH = TRAIN_SIZE // BATCH
DROPOUT = 0.3
LEARNING_RATE = 0.01
NOISE_STD = 0.1
SCALE_RANGE = (0.8, 1.2)
DATA_SEED = 2024  # the data and its split are fixed: every run trains on the same samples
