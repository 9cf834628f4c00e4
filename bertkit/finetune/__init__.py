"""Fine-tuning: sequence classification and regression, NER, extractive QA; evaluation and prediction."""
from bertkit.finetune.job import FinetuneConfig, FinetuneResult, run_finetune
from bertkit.finetune.model import FinetuneModel
from bertkit.finetune.tasks import TASKS
from bertkit.finetune.predict import evaluate_file, predict, predict_file
from bertkit.finetune.tasks import TaskOptions

__all__ = ["FinetuneConfig", "FinetuneResult", "run_finetune", "TASKS", "FinetuneModel", "evaluate_file",
           "predict", "predict_file", "TaskOptions"]
