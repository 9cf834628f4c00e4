"""Students: a shallower copy of the teacher initialized from its layers (DistilBERT), or any config.

Copying every k-th layer (plus the embeddings, pooler and task head) starts the student close to the
teacher's function; DistilBERT reports this initialization matters more than the loss choice.
"""
from __future__ import annotations

import copy
import sys
from typing import Optional, Sequence

from torch import nn

from bertkit.checkpoints import load_checkpoint
from bertkit.distill.output import require_float
from bertkit.errors import BertkitError
from bertkit.model.encoder import Encoder
from bertkit.model.sentence import SentencePipeline


def every_kth_layer(teacher_layers: int, student_layers: int) -> list[int]:
    """Teacher layers k-1, 2k-1, ..., the last one (k = teacher / student, spread evenly when it does not divide):
    one in two for a half-depth student, as DistilBERT's, ending at the teacher's top layer. The copied task head
    reads the top layer's output, so a student that starts from teacher layers 0, k, 2k, ... (without the top one)
    starts near chance (measured on BBC, MiniLM-L6 to 2 layers: 22% against 80% with the top layer); and the
    hidden-state loss maps student layer m to teacher layer m * k, the layer it was copied from."""
    if not 0 < student_layers <= teacher_layers:
        raise ValueError(f"a student needs 1..{teacher_layers} layers, got {student_layers}")
    return [-(-(i + 1) * teacher_layers // student_layers) - 1 for i in range(student_layers)]


def student_from_teacher(teacher: Encoder, num_layers: int, layers: Optional[Sequence[int]] = None) -> Encoder:
    """A new Encoder of `num_layers` blocks: embeddings, the chosen blocks and the pooler copied from the teacher."""
    layers = list(layers) if layers is not None else every_kth_layer(teacher.config.num_layers, num_layers)
    if len(layers) != num_layers:
        raise ValueError(f"{len(layers)} teacher layers given for a {num_layers}-layer student")
    if len({id(b) for b in teacher.blocks}) != len(teacher.blocks):
        raise ValueError("the teacher shares layers (ALBERT); build the student from a config instead")
    config = teacher.config.replace(num_layers=num_layers)
    student = Encoder(config)
    student.embeddings.load_state_dict(teacher.embeddings.state_dict())
    # deepcopy keeps the block's own type (a pruned teacher's smaller attention included)
    student.blocks = nn.ModuleList(copy.deepcopy(teacher.blocks[i]) for i in layers)
    if teacher.pooler is not None and student.pooler is not None:
        student.pooler.load_state_dict(teacher.pooler.state_dict())
    if teacher.final_norm is not None and student.final_norm is not None:
        student.final_norm.load_state_dict(teacher.final_norm.state_dict())
    return student.to(next(teacher.parameters()).device).train(teacher.training)


def copy_head(head: nn.Module) -> nn.Module:
    return copy.deepcopy(head)


def parameter_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def same_vocabulary(teacher_tokenizer, student_tokenizer) -> bool:
    if teacher_tokenizer is None or student_tokenizer is None:
        return False
    if teacher_tokenizer.vocab_size != student_tokenizer.vocab_size:
        return False
    probe = range(0, teacher_tokenizer.vocab_size, max(1, teacher_tokenizer.vocab_size // 500))
    return all(teacher_tokenizer.id_to_token(i) == student_tokenizer.id_to_token(i) for i in probe)


def fitted_max_length(max_length: int, teacher, student: Encoder, student_dir: Optional[str]) -> int:
    """--max-length, cut to the smaller position table of the teacher and the student (one line says so): longer
    rows would index past it."""
    limit, flag, where = min((teacher.config.max_length, "--teacher", teacher.path),
                             (student.config.max_length, "--student", student_dir), key=lambda x: x[0])
    if max_length > limit:
        print(f"bertkit: --max-length {max_length} is cut to {limit}, the positions of {flag} {where}", file=sys.stderr)
    return min(max_length, limit)


def student_sentence(teacher, student: Encoder, **changes) -> SentencePipeline:
    """The teacher folder's sentence settings (pooling, normalization, max length; `changes` replace some) for the
    saved student, without dense layers or whitening (fitted to the teacher's vectors), and its max length at most
    the student's positions (else the folder would not load)."""
    config = teacher.sentence.config.replace(**changes)
    if config.max_length is not None and config.max_length > student.config.max_length:
        config = config.replace(max_length=student.config.max_length)
    return SentencePipeline(config)


def build_student(student_dir: Optional[str], student_layers: Optional[int], teacher) -> tuple[Encoder, object]:
    """-> (student encoder, tokenizer): a given student folder (same vocabulary as the teacher checkpoint),
    or every k-th layer of the teacher."""
    if student_dir:
        student = load_checkpoint(student_dir)
        require_float(student, "student", "distill into")
        if not same_vocabulary(teacher.tokenizer, student.tokenizer):
            raise BertkitError(f"--student {student_dir} has another vocabulary than the teacher; distillation "
                               "feeds both the same token ids")
        sizes = parameter_count(student.encoder), parameter_count(teacher.encoder)
        if sizes[0] >= sizes[1]:
            print(f"bertkit: --student {student_dir} is not smaller than the teacher ({sizes[0] / 1e6:.1f}M vs "
                  f"{sizes[1] / 1e6:.1f}M encoder parameters); distillation usually trains a smaller model",
                  file=sys.stderr)
        return student.encoder, student.tokenizer
    if not student_layers:
        raise BertkitError("distill needs --student DIR or --student-layers N")
    try:
        return student_from_teacher(teacher.encoder, student_layers), teacher.tokenizer
    except ValueError as err:
        raise BertkitError(f"--student-layers {student_layers}: {err}") from None
