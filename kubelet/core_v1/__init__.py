"""The core/v1 API objects the kubelet reads, typed as the API spells them
(k8s.io/api/core/v1 types.go, only the fields this kubelet reads or writes),
one module per kind and what only it is made of.

Every field the API may leave out is optional (total=False); `metadata` and
`spec` of a Pod are always there once a pod source has admitted it
(config/common.py apply_defaults). Where two API types have one shape they are
one TypedDict under both names. This package re-exports every type, and
kubelet/types.py re-exports this package.
"""

from kubelet.core_v1.config_objects import *  # noqa: F403
from kubelet.core_v1.container import *  # noqa: F403
from kubelet.core_v1.meta import *  # noqa: F403
from kubelet.core_v1.node import *  # noqa: F403
from kubelet.core_v1.pod import *  # noqa: F403
from kubelet.core_v1.storage import *  # noqa: F403
from kubelet.core_v1.volume import *  # noqa: F403
