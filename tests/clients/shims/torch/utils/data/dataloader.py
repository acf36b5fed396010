"""torch.utils.data.dataloader.DataLoader over an IterableDataset, in the calling process."""
import random
from typing import Generic, TypeVar

T = TypeVar("T")


def get_worker_info():
    """None: the items are produced in the main process (torch returns None there too)."""
    return None


def _default_collate(batch):
    return batch


class DataLoader(Generic[T]):
    def __init__(self, dataset, batch_size=1, shuffle=False, collate_fn=None, num_workers=0, prefetch_factor=None,
                 generator=None, drop_last=False, **kwargs):
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.collate_fn = collate_fn or _default_collate
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.generator = generator
        self.drop_last = drop_last

    def __iter__(self):
        items = iter(self.dataset)
        if self.shuffle:  # torch cannot shuffle an IterableDataset either; kept for the argument's sake
            items = list(items)
            random.Random(self.generator.initial_seed() if self.generator else 0).shuffle(items)
            items = iter(items)
        if self.batch_size is None:
            for item in items:
                yield self.collate_fn(item)
            return
        batch = []
        for item in items:
            batch.append(item)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)
