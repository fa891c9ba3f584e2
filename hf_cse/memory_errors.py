"""What a device's allocator raises when it runs out of memory, recognised in one place: the trainer turns it into a
refusal naming the batch (:mod:`hf_cse.out_of_memory`), a loss into one naming its own size (GS-InfoNCE's noise)."""

from __future__ import annotations

import torch

# CUDA, ROCm and XPU raise torch.OutOfMemoryError; Apple's MPS and the CPU allocator a RuntimeError with these words
_OUT_OF_MEMORY_WORDS = ("MPS backend out of memory", "DefaultCPUAllocator: can't allocate memory")


def is_out_of_memory(err: BaseException) -> bool:
    if isinstance(err, torch.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and any(words in str(err) for words in _OUT_OF_MEMORY_WORDS)
