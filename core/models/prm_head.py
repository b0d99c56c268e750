"""PRM models that are a decoder plus a small head on its hidden states, not a causal LM.

* Qwen2.5-Math-PRM (hub ``Qwen/Qwen2.5-Math-PRM-7B``/``-72B``, architecture
  ``Qwen2ForProcessRewardModel``) is a Qwen2 decoder whose hidden states go through
  ``score = Linear(hidden, hidden) -> ReLU -> Linear(hidden, 2)``; its checkpoint stores ``model.*``
  and ``score.0.*``/``score.2.*`` (model card and the ``modeling_qwen2_rm.py`` shipped with it).
* Skywork-o1-Open-PRM (hub ``Skywork/Skywork-o1-Open-PRM-Qwen-2.5-1.5B``/``-7B``, architecture
  ``Qwen2ForPrmModel``) is a Qwen2 decoder plus a value head ``v_head.summary = Linear(hidden, 1)``
  (with bias) on the last hidden states; its checkpoint stores ``model.*``, ``lm_head.weight`` (not
  used here) and ``v_head.summary.weight``/``.bias`` (``model_utils/prm_model.py`` of
  github.com/SkyworkAI/skywork-o1-prm-inference, whose value head runs in float32).
* PRMs trained with TRL's ``PRMTrainer`` are ``AutoModelForTokenClassification`` models
  (``Qwen2ForTokenClassification``, ``LlamaForTokenClassification``, ...): the decoder plus
  ``score = Linear(hidden, num_labels)``; they load as the `transformers` class with the engine's
  calling convention added (:func:`token_classifier_class`).

The classes have exactly the checkpoints' parameter layout, so ``from_pretrained`` loads the real
checkpoints without ``trust_remote_code``.

The engine calls every model the same way (packed ``input_ids``, ``position_ids``,
``use_cache=False``, a ``logits_to_keep`` index tensor and its attention metadata as keyword
arguments) and reads ``.logits``: here those are the head's outputs ``[1, rows, 2]`` at the kept
positions only, so the head runs on the PRM read positions and nowhere else.
"""

from __future__ import annotations

import functools

import torch
from torch import nn
from transformers import Qwen2Model
from transformers.modeling_layers import GenericForTokenClassification
from transformers.modeling_outputs import TokenClassifierOutput
from transformers.models.qwen2.modeling_qwen2 import Qwen2PreTrainedModel

#: what ``LoadedModel.head`` reports for these models (see ``core.verify.base.Scorer.head``): a
#: classifier's outputs are one logit per class, a value head's one scalar per position
CLASSIFIER_HEAD = "classifier"
VALUE_HEAD = "value"


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


class ValueHead(nn.Module):
    """Skywork's value head: ``summary = Linear(hidden, 1)`` with bias, applied in its own dtype.

    ``forward(hidden [..., hidden])`` casts the hidden states to the head's dtype (float32: the
    model keeps this module in float32, as Skywork's ``ValueHead`` upcasts) and returns ``[..., 1]``.
    Skywork's dropout before the head is left out: it is the identity at inference.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.summary = nn.Linear(hidden_size, 1)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.summary(hidden.to(self.summary.weight.dtype))


class Qwen2ValueHeadPRM(Qwen2PreTrainedModel):
    """Qwen2 decoder + value head (Skywork-o1-Open-PRM), callable by the engine like a causal LM.

    ``forward`` returns :class:`TokenClassifierOutput` whose ``logits [batch, rows, 1]`` (float32)
    are the value head's outputs at the rows selected by ``logits_to_keep``: the step reward is
    their sigmoid (Skywork's ``return_probs=True``).
    """

    head_kind = VALUE_HEAD
    # Skywork's head is an fp32 nn.Linear next to a bf16 decoder; keep it so in every dtype
    _keep_in_fp32_modules_strict = ["v_head"]

    def __init__(self, config):
        super().__init__(config)
        self.model = Qwen2Model(config)
        self.v_head = ValueHead(config.hidden_size)
        self.post_init()

    def forward(self, input_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                use_cache: bool = False, logits_to_keep: int | torch.Tensor = 0, **kwargs) -> TokenClassifierOutput:
        """Value-head outputs ``[batch, rows, 1]`` (float32) at the kept positions; ``kwargs`` reach attention."""
        out = self.model(input_ids=input_ids, position_ids=position_ids, use_cache=use_cache, **kwargs)
        return TokenClassifierOutput(logits=self.v_head(keep_rows(out.last_hidden_state, logits_to_keep)))


class EngineTokenClassification:
    """The engine's calling convention for a `transformers` ``*ForTokenClassification`` model.

    Mixed in before the `transformers` class (:func:`token_classifier_class`): ``forward`` runs the
    decoder with the engine's keyword arguments and the ``score`` head only on the rows selected by
    ``logits_to_keep``, returning ``logits [batch, rows, num_labels]`` (model dtype). The dropout
    before the head is left out: it is the identity at inference.
    """

    head_kind = CLASSIFIER_HEAD

    def forward(self, input_ids: torch.Tensor | None = None, position_ids: torch.Tensor | None = None,
                use_cache: bool = False, logits_to_keep: int | torch.Tensor = 0, **kwargs) -> TokenClassifierOutput:
        decoder = getattr(self, self.base_model_prefix)
        out = decoder(input_ids=input_ids, position_ids=position_ids, use_cache=use_cache, **kwargs)
        return TokenClassifierOutput(logits=self.score(keep_rows(out.last_hidden_state, logits_to_keep)))


@functools.cache
def token_classifier_class(architecture: str):
    """The engine-callable subclass of `transformers`' ``architecture`` (a ``*ForTokenClassification``
    class built on ``GenericForTokenClassification``: decoder + ``score`` head), or None when
    `transformers` has no such class. Same parameter names as the original, so its checkpoints load."""
    import transformers

    cls = getattr(transformers, architecture, None) if architecture.endswith("ForTokenClassification") else None
    if not isinstance(cls, type) or not issubclass(cls, GenericForTokenClassification):
        return None
    return type(f"Engine{architecture}", (EngineTokenClassification, cls), {"__module__": __name__})


#: ``config.json`` architectures that load as a decoder + head model, and the class that loads them
#: (token-classification architectures are found by :func:`head_class`)
HEAD_ARCHITECTURES = {"Qwen2ForProcessRewardModel": Qwen2ProcessRewardModel, "Qwen2ForPrmModel": Qwen2ValueHeadPRM}


def head_class(architecture: str):
    """The decoder + head class that loads a checkpoint of ``architecture`` (``config.json``), or None."""
    return HEAD_ARCHITECTURES.get(architecture) or token_classifier_class(architecture)
