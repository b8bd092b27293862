"""A DDP communication hook over libprism, for a model whose process group
stays Gloo (or any other): DDP hands each gradient bucket to the hook, which
sums it exactly through a PRISM group of its own and divides by the number of
ranks once, after the sum (DDP's own path divides each rank's gradient before).

    state = prism_torch.HookState()               # collective: every rank, same point
    model.register_comm_hook(state, prism_torch.allreduce_hook)
"""
from datetime import timedelta
from typing import Optional

import torch
import torch.distributed as dist

from .backend import Options, ProcessGroupPrism


class HookState:
    """A PRISM group over the ranks of `process_group` (default: the default group), rendezvous
    through that group's own store under the prefix `prism_hook/<name>`."""

    def __init__(self, process_group=None, options: Optional[Options] = None, name: str = 'ddp',
                 timeout: timedelta = timedelta(minutes=5)):
        pg = process_group or dist.distributed_c10d._get_default_group()
        store = dist.PrefixStore(f'prism_hook/{name}', dist.distributed_c10d._get_default_store())
        self.pg = ProcessGroupPrism(store, pg.rank(), pg.size(), timeout, options, name=name)

    def close(self):
        self.pg.close()


def allreduce_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """The bucket's exact sum (state.pg's policy), divided by the group's size."""
    return state.pg.allreduce([bucket.buffer()], _AVG).get_future().then(lambda fut: fut.value()[0])


_AVG = dist.AllreduceOptions()
_AVG.reduceOp = dist.ReduceOp.AVG
