"""Fixtures of the handler tests: the tiny Llama and a fresh app (models, limits, live sessions) per test."""

from __future__ import annotations

import pytest
from tiny_models import tiny_model

from explorer.ui.hosting import LOCAL, Served
from explorer.ui.models import ModelRegistry


@pytest.fixture(scope="module")
def model():
    """A tiny random Llama with a character tokenizer (tests/tiny_models.py)."""
    return tiny_model("llama")


@pytest.fixture
def served(model):
    """A fresh app over `model` with the local limits."""
    return Served.create(ModelRegistry(model), LOCAL)
