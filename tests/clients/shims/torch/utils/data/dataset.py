"""torch.utils.data.dataset.IterableDataset: a generic base class whose subclasses define __iter__."""
from typing import Generic, TypeVar

T = TypeVar("T")


class IterableDataset(Generic[T]):
    def __iter__(self):
        raise NotImplementedError
