"""A script whose compiled function lives in `__main__`, saved only when the
interpreter exits: `python saved_at_exit.py STORE`."""

import sys

import torch

import precompile

precompile.install(sys.argv[1])


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.lin(x))


with torch.no_grad():
    torch.compile(Net())(torch.randn(2, 4))
