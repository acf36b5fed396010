"""
A stand-in for the few names of PyTorch that guidellm 0.8 imports (its data
loader, guidellm/data/loaders/torch.py: torch.utils.data.DataLoader,
IterableDataset, get_worker_info and torch.Generator), so that the real
guidellm client runs in tests/e2e/test_clients_bench.py without installing
torch: PyPI's torch for Linux is the CUDA build (gigabytes) and the CPU wheel
index is not reachable from CI.

Only guidellm's subprocess sees it (PYTHONPATH=tests/clients/shims, set by
the test); nothing else imports it. What it does is what torch's DataLoader
does with guidellm's arguments in one process: iterate the IterableDataset,
cut batches of batch_size and hand each to collate_fn (guidellm passes
batch_size=1 and a collate_fn that takes the one item). guidellm asks for one
worker process (num_workers=1); here the items are produced in the calling
process, which yields the same items in the same order (get_worker_info() is
None, as in torch's main process). Not a tensor library: anything else
raises.
"""
__version__ = "0.0.0+loragate.shim"

from . import utils  # noqa: E402,F401


class Generator:
    """torch.Generator: guidellm seeds it and passes it to the DataLoader, which uses it only to shuffle."""

    def __init__(self, device=None):
        self.seed = 0

    def manual_seed(self, seed):
        self.seed = int(seed)
        return self

    def initial_seed(self):
        return self.seed


def __getattr__(name):
    raise AttributeError(f"torch.{name} is not available: tests/clients/shims/torch is a stand-in for guidellm's "
                         "data loader only")
