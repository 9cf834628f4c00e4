from bertkit.checkpoints.io import Checkpoint, build_head, load_checkpoint, save_checkpoint, save_folder

__all__ = ["Checkpoint", "build_head", "load_checkpoint", "save_checkpoint", "save_folder"]
