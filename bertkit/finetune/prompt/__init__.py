"""Prompt-based few-shot classification: PET (pattern + verbalizer over the MLM head) and P-tuning."""
