"""Linear models over frozen features: the TF-IDF baseline, the linear probe and the hybrid (issue 19)."""
from bertkit.finetune.linear.baseline import BaselineConfig, BaselineResult, fit_baseline, run_baseline
from bertkit.finetune.linear.folder import is_tfidf_folder, linear_section
from bertkit.finetune.linear.predictor import LinearPredictor, linear_predictor_of

__all__ = ["BaselineConfig", "BaselineResult", "fit_baseline", "run_baseline", "is_tfidf_folder", "linear_section",
           "LinearPredictor", "linear_predictor_of"]
