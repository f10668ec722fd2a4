"""The drills' training loops, each with one bug. The lab shows each function's own source, and runs it.

Every loop is complete and reads on its own, as in an interview: it builds its DataLoader and
optimizer, trains for `bench.epochs` epochs and validates. So the loops repeat each other on
purpose; the one line that differs is the drill. `bench` (explorers/drills/harness.py) supplies
seeded data and models and records what the loop logs; it measures the rest from outside.

A fix (explorers/drills/fixes.py) is an edit of a loop's source lines; the fixed loop is this
module's source with that edit, compiled here, never text a user typed.

The comments are shown too, so none says what a line is for where that would name the bug: the
shapes, the batch sizes and the order of the data are left for the evidence to reveal.
"""

from __future__ import annotations

import gc

import torch
import torch.nn.functional as F  # noqa: N812  (the name every PyTorch loop uses)
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from explorers.drills.harness import CLASSES, HIDDEN

ACCUMULATION = 4  # micro-batches per optimizer step in the accumulation drill
# What a fixed loop may name besides these loops: compiled in this module's namespace.
__all__ = ["ACCUMULATION", "CLASSES", "HIDDEN", "DataLoader", "DistributedSampler", "F", "TensorDataset", "gc"]
__all__ += ["nn", "torch"]


def forgot_zero_grad(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def zero_grad_after_backward(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.zero_grad()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def train_mode_never_restored(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def validation_in_train_mode(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def loss_tensor_summed(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    val_loader = DataLoader(TensorDataset(bench.val_x, bench.val_y), batch_size=20)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        val_loss = 0.0
        for x, y in val_loader:
            val_loss += F.cross_entropy(model(x), y)
        bench.epoch(float(val_loss) / len(val_loader))


def softmax_before_loss(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x).softmax(dim=1), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def target_shape_broadcast(bench):
    model = bench.regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(bench.regression_set, batch_size=16, shuffle=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        bench.epoch()


def detached_body(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            features = model.body(x).detach()
            loss = F.cross_entropy(model.head(features), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def learning_rate_too_high(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=10.0)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def unshuffled_sorted_data(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=False, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def accumulation_undivided(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=4, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for i, (x, y) in enumerate(loader, 1):
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            if i % ACCUMULATION == 0:
                optimizer.step()
                optimizer.zero_grad()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def optimizer_before_new_head(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model.head = nn.Linear(HIDDEN, CLASSES)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def in_place_on_saved(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            probs = model(x).softmax(dim=1)
            probs.clamp_(min=1e-6)
            loss = F.nll_loss(probs.log(), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def sampler_without_set_epoch(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    # this process is rank 0 of 2: it trains on its half of the data
    sampler = DistributedSampler(bench.train_set, num_replicas=2, rank=0, shuffle=True, seed=bench.seed)
    loader = DataLoader(bench.train_set, batch_size=16, sampler=sampler, drop_last=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())


def batchnorm_batch_of_one(bench):
    model = bench.model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(bench.train_set, batch_size=16, shuffle=True)
    for epoch in range(bench.epochs):
        model.train()
        for x, y in loader:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            bench.log(loss.item())
        model.eval()
        with torch.no_grad():
            accuracy = (model(bench.val_x).argmax(dim=1) == bench.val_y).float().mean()
        bench.epoch(accuracy.item())
