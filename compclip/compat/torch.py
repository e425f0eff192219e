"""torch / open_clip / DeepSpeed: the one change the trainer makes to a model's behaviour.

`one_dim_logit_scale(model)`: DeepSpeed cannot broadcast 0-dim parameters (`view(torch.uint8)`
fails), and open_clip's CLIP holds its logit scale as one. Under DeepSpeed the trainer makes it
shape [1]; two state-dict hooks keep the model's state dicts as plain open_clip writes and
reads them: saving squeezes it back to 0-dim (`register_state_dict_post_hook`), loading a 0-dim
one unsqueezes it (`register_load_state_dict_pre_hook`), so checkpoints load into plain
open_clip. Both hooks are torch's public API (the private `_register_state_dict_hook` /
`_register_load_state_dict_pre_hook` are no longer used) and change the state dict in place.
Checked on torch >=2.5,<2.15 with DeepSpeed >=0.16,<0.20 (tests/test_trainer_multiproc.py,
ZeRO-2 resumed bit-identically; tests/test_compat.py). Outside that range the parameter is left
0-dim, open_clip's own shape, with a warning: a DeepSpeed run may then fail to broadcast it.
"""
from __future__ import annotations

import torch

from compclip.compat import in_checked_range

CHECKED = {"torch": ("2.5", "2.15"), "deepspeed": ("0.16", "0.20")}


def patched() -> bool:
    return all(in_checked_range(dist, *CHECKED[dist]) for dist in ("torch", "deepspeed"))


def one_dim_logit_scale(model: torch.nn.Module) -> bool:
    """Make `model.logit_scale` shape [1] with state dicts kept 0-dim (module docstring); False
    (the model untouched) outside the checked versions."""
    if not patched():
        return False
    model.logit_scale = torch.nn.Parameter(model.logit_scale.detach().reshape(1),
                                           requires_grad=model.logit_scale.requires_grad)

    def squeeze(module, state_dict, prefix, _meta) -> None:
        key = prefix + "logit_scale"
        if key in state_dict:
            state_dict[key] = state_dict[key].reshape(())

    def unsqueeze(module, state_dict, prefix, *_args) -> None:
        key = prefix + "logit_scale"
        if key in state_dict and state_dict[key].dim() == 0:
            state_dict[key] = state_dict[key].reshape(1)

    model.register_state_dict_post_hook(squeeze)
    model.register_load_state_dict_pre_hook(unsqueeze)
    return True
