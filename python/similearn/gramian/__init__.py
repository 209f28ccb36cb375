"""Two-tower models trained with Gramian estimates (Krichene et al., "Efficient
training on very large corpora via Gramian estimation", ICLR 2019).

- :mod:`.estimators`: the Gramian estimators SOGram (Alg. 2), SAGram (Alg. 1) and
  the candidate-sampling baselines (Sec. 3.3), ``exact_gramian``, ``gramian_error``;
- :mod:`.towers`: the towers (embedding bags, ReLU layers): init, forward, backward;
- :mod:`.training`: the training state and the step (one definition, two engines);
- :mod:`.model`: the :class:`TwoTower` estimator;
- :mod:`.study`: the Gramian-error study along a training trajectory (Sec. 4.2);
- :mod:`.torch`: the PyTorch adapter ``GramianPenalty`` (imported explicitly; needs torch).
"""
from .estimators import SAGram, SampledGramian, SOGram, exact_gramian, gramian_error, item_weights
from .model import TwoTower
from .study import gramian_error_trajectory

__all__ = ["TwoTower", "SOGram", "SAGram", "SampledGramian", "exact_gramian", "gramian_error", "item_weights",
           "gramian_error_trajectory"]
