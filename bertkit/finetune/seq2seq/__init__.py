"""Sequence-to-sequence fine-tuning of an encoder under the UniLM mask: training, evaluation, generation."""
