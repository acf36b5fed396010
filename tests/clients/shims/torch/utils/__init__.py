"""torch.utils: only torch.utils.data (see torch/__init__.py)."""
from . import data  # noqa: F401
