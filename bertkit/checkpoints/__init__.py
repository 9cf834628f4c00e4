from bertkit.checkpoints.io import Checkpoint, build_head, load_checkpoint, save_checkpoint

__all__ = ["Checkpoint", "build_head", "load_checkpoint", "save_checkpoint"]
