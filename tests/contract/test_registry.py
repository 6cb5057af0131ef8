"""``Registry[T]``: registration once per name, order kept, unknown names listed, settings validated."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from contract.registry import Registry, UnknownNameError


def test_registered_items_are_found_in_order_and_a_name_registers_once() -> None:
    shapes: Registry[int] = Registry("shape")

    @shapes.register("square")
    def square() -> int:
        return 4

    shapes.add("triangle", lambda: 3)
    assert shapes.get("square") is square and "triangle" in shapes and len(shapes) == 2
    assert [name for name, _ in shapes.items()] == ["square", "triangle"]  # registration order
    with pytest.raises(ValueError, match="shape 'square' registered twice"):
        shapes.add("square", lambda: 0)


def test_an_unknown_name_lists_the_known_ones() -> None:
    modes: Registry[str] = Registry("grading mode")
    modes.add("pytest", "p")
    modes.add("isolated", "i")
    with pytest.raises(UnknownNameError) as caught:
        modes.get("unittest")
    assert str(caught.value) == "unknown grading mode 'unittest'; known: isolated, pytest"


def test_a_setting_is_validated_against_the_registry_keys() -> None:
    algos: Registry[str] = Registry("algorithm")
    algos.add("ppo", "gae")

    class Settings(BaseModel):
        algo: str = "ppo"
        _check = field_validator("algo")(algos.validator())

    assert Settings(algo="ppo").algo == "ppo"
    with pytest.raises(ValidationError, match="unknown algorithm 'dpo'; known: ppo"):
        Settings(algo="dpo")
    algos.add("dpo", "pairs")  # registered later (a plug-in): the same setting now validates
    assert Settings(algo="dpo").algo == "dpo"
