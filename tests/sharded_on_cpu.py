"""``accelerate launch`` script for tests/trainer/test_sharded_engines.py: hf_cse's train command with FSDP or
DeepSpeed really on, on a CPU.

accelerate turns FSDP / DeepSpeed on only on accelerators, and hf_cse refuses them on a CPU (where accelerate would
silently train plain DDP). Here accelerate is made to take its GPU branch with the gloo backend and the CPU as device,
and hf_cse's refusal is lifted: everything else -- accelerate's FSDP2 wrapping, DeepSpeed's ZeRO engines, the
Trainer, hf_cse's saving and export -- runs as on GPUs. For tests only.
"""

import os
import sys

import accelerate.state
from accelerate.utils import DistributedType

os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"
_state_init = accelerate.state.PartialState.__init__


def _as_on_gpus(self, cpu=False, **kwargs):
    _state_init(self, cpu=False, **kwargs)


def _gloo_backend(self, cpu=False, sagemaker_dp=False, backend=None):
    return "gloo", DistributedType.MULTI_GPU


accelerate.state.PartialState.__init__ = _as_on_gpus
accelerate.state.PartialState._prepare_backend = _gloo_backend

import hf_cse.distributed  # noqa: E402
import hf_cse.trainer_options  # noqa: E402

hf_cse.distributed.check_sharding_device = hf_cse.trainer_options.check_sharding_device = lambda training_args: None

from hf_cse.cli.entry_points import train  # noqa: E402

if __name__ == "__main__":
    sys.exit(train(prog="run_unsup.py"))
