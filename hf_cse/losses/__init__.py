"""The loss library: one objective per file, all reachable by name through :func:`build_loss`.

>>> from hf_cse.losses import build_loss, available_losses
>>> loss_fn = build_loss("focal_infonce", temperature=0.07, m=0.3)
>>> out = loss_fn(z1, z2)        # z1, z2: (N, D) projector outputs of the two views
>>> out.loss, out.metrics

The losses shipped, by family (:func:`available_losses` lists every registered one, a loss added since too):
InfoNCE variants (``infonce``, ``gs_infonce``, ``focal_infonce``, ``off_dropout_infonce``),
``dcl``; the gradient paradigm of Li et al., ACL 2024 (``paradigm``), the effective losses it analyses
(``arccon``, ``mpt``, ``met``), the "ineffective" originals (``align_uniform_mhe``, ``align_uniform_mhs``,
``barlow_twins``, ``vicreg``) and their modified versions (``m_mhe``, ``m_mhs``, ``m_barlow``, ``m_vicreg``).
"""

# Importing a loss module registers it.
from . import (  # noqa: F401
    align_uniform_mhe,
    align_uniform_mhs,
    arccon,
    barlow_twins,
    dcl,
    focal_infonce,
    gs_infonce,
    infonce,
    m_barlow,
    m_mhe,
    m_mhs,
    m_vicreg,
    met,
    mpt,
    off_dropout_infonce,
    paradigm,
    vicreg,
)
from .base import ContrastiveLoss, LossOutput, batch_diagnostics, cosine_matrix
from .inputs import check_pair
from .registry import available_losses, build_loss, get_loss_class, loss_defaults, loss_hyperparameters, register_loss

__all__ = [
    "ContrastiveLoss",
    "LossOutput",
    "available_losses",
    "batch_diagnostics",
    "build_loss",
    "check_pair",
    "cosine_matrix",
    "get_loss_class",
    "loss_defaults",
    "loss_hyperparameters",
    "register_loss",
]
