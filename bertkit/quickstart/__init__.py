"""`bertkit quickstart`: the main job end to end on data it obtains itself (vocabulary, pre-training, three
fine-tunings, a table), and the MiniLM search demo."""
from bertkit.quickstart.job import QuickstartResult, run_quickstart
from bertkit.quickstart.plan import QuickstartPlan, default_plan, quick_plan, with_minutes
from bertkit.quickstart.search_demo import builtin_sentences, run_search_demo

__all__ = ["QuickstartResult", "run_quickstart", "QuickstartPlan", "default_plan", "quick_plan", "with_minutes",
           "builtin_sentences", "run_search_demo"]
