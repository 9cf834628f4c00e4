import torch

# Tiny models on a shared 2-core machine: one intra-op thread is ~10x faster than contending for two.
torch.set_num_threads(1)
