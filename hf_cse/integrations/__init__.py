"""Bridges from hf_cse to other training libraries (sentence-transformers: :mod:`.sentence_transformers`)."""
