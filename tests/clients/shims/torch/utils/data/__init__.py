"""torch.utils.data as guidellm's data loader uses it (see torch/__init__.py)."""
from .dataloader import DataLoader, get_worker_info
from .dataset import IterableDataset

__all__ = ["DataLoader", "IterableDataset", "get_worker_info"]
