"""hf_cse: unsupervised contrastive sentence embeddings on the Hugging Face Trainer."""

__version__ = "0.1.0"

from . import losses, models  # noqa: E402,F401  (registers losses and Auto classes)
from .models import METHODS, SimCSEModel, get_method  # noqa: E402,F401
