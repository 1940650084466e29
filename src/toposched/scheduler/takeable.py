"""The running jobs a preemption may weigh at one time, read once and shared by the cycle's
victim searches while no job of them stops or joins them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

IntArray = NDArray[np.int64]


@dataclass
class Takeable:
    """`slots` of the preemptible index, in the order victim searches read them."""

    slots: IntArray

    def __post_init__(self) -> None:
        self.slots.setflags(write=False)  # shared by every search until forgotten
