"""PRM models that are a decoder plus a token-classification head, not a causal LM.

Qwen2.5-Math-PRM (hub ``Qwen/Qwen2.5-Math-PRM-7B``/``-72B``, architecture
``Qwen2ForProcessRewardModel``) is a Qwen2 decoder whose hidden states go through
``score = Linear(hidden, hidden) -> ReLU -> Linear(hidden, 2)``; its checkpoint stores ``model.*``
and ``score.0.*``/``score.2.*`` (model card and the ``modeling_qwen2_rm.py`` shipped with it). The
class below has exactly that parameter layout, so ``from_pretrained`` loads the real checkpoint
without ``trust_remote_code``.

The engine calls every model the same way (packed ``input_ids``, ``position_ids``,
``use_cache=False``, a ``logits_to_keep`` index tensor and its attention metadata as keyword
arguments) and reads ``.logits``: here those are the head's outputs ``[1, rows, 2]`` at the kept
positions only, so the head runs on the PRM read positions and nowhere else.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import Qwen2Model
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.models.qwen2.modeling_qwen2 import Qwen2PreTrainedModel

#: what ``LoadedModel.head`` reports for these models (see ``core.verify.base.Scorer.head``)
CLASSIFIER_HEAD = "classifier"


def keep_rows(hidden: torch.Tensor, logits_to_keep: int | torch.Tensor) -> torch.Tensor:
    """Rows of ``hidden [batch, T, hidden]`` that the head should see.

    ``logits_to_keep`` follows `transformers`: a 1-D index tensor of positions, or an int ``n``
    meaning the last ``n`` positions (0 = all).
    """
    if isinstance(logits_to_keep, torch.Tensor):
        return hidden[:, logits_to_keep]
    return hidden[:, -logits_to_keep:] if logits_to_keep else hidden


class Qwen2ProcessRewardModel(Qwen2PreTrainedModel):
    """Qwen2 decoder + 2-class step head (Qwen2.5-Math-PRM), callable by the engine like a causal LM.

    ``forward`` returns :class:`TokenClassifierOutput` whose ``logits [batch, rows, 2]`` are the
    head's outputs at the rows selected by ``logits_to_keep``; class 1 is "step is correct"
    (model card: step reward = softmax(logits)[..., 1] at each ``<extra_0>``).
    """

    head_kind = CLASSIFIER_HEAD

    def __init__(self, config):
        super().__init__(config)
        self.model = Qwen2Model(config)
        hidden = config.hidden_size
        self.score = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2))
        self.post_init()

    def forward(self, input_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                use_cache: bool = False, logits_to_keep: int | torch.Tensor = 0, **kwargs) -> TokenClassifierOutput:
        """Head outputs ``[batch, rows, 2]`` (model dtype) at the kept positions; ``kwargs`` reach attention."""
        out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=use_cache, **kwargs)
        return TokenClassifierOutput(logits=self.score(keep_rows(out.last_hidden_state, logits_to_keep)))


#: ``config.json`` architectures that load as a decoder + head model, and the class that loads them
HEAD_ARCHITECTURES = {"Qwen2ForProcessRewardModel": Qwen2ProcessRewardModel}
