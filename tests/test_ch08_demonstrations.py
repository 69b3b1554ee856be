"""Chapter 08's demonstrations can fail: fed a wrong position function, the cells that show a
left-padded batch against each row alone print ✗ and return False (helpers.library.padded_generate,
padded_decode). A demonstration that prints ✓ for wrong code teaches nothing; the blind review of
2026-11-27 found the chapter's old `generate` cell printing [True, True, True] for three wrong functions."""

from __future__ import annotations

import pytest
import torch

from helpers import library, reference

pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def rows() -> list[torch.Tensor]:
    """The chapter's three prompts: 5, 8 and 3 tokens, none of them the pad (0)."""
    generator = torch.Generator().manual_seed(3)
    return [torch.randint(1, library.VOCAB - 1, (n,), generator=generator) for n in (5, 8, 3)]


def first_real_token(mask: torch.Tensor) -> torch.Tensor:  # a second right function: arange minus the first real column
    first = mask.long().argmax(-1, keepdim=True)
    return (torch.arange(mask.shape[1]) - first).clamp(min=0)


WRONG_POSITIONS = {
    "columns, ignoring the pads": lambda mask: torch.arange(mask.shape[1]).expand(mask.shape),
    "cumsum without -1": lambda mask: mask.long().cumsum(-1),
    "counted from the right": lambda mask: mask.long().flip(-1).cumsum(-1).flip(-1) - 1,
}

WRONG_DECODE = {
    "one shared position (the column count)": lambda mask: torch.full((len(mask), 1), mask.shape[1]),
    "the row's last position, not the next": lambda mask: mask.long().sum(-1, keepdim=True) - 1,
}


def test_left_pad_puts_every_rows_last_token_in_the_last_column(rows):
    ids, mask = library.left_pad(rows)
    assert ids.shape == mask.shape == (3, 8)
    assert mask.sum(-1).tolist() == [5, 8, 3]
    for b, row in enumerate(rows):
        assert torch.equal(ids[b, 8 - len(row) :], row) and (ids[b, : 8 - len(row)] == 0).all()


@pytest.mark.parametrize("positions", [reference.position_ids_from_mask, first_real_token], ids=["cumsum", "argmax"])
def test_gpt2_generate_passes_right_position_functions(rows, positions, capsys):
    assert library.padded_generate("GPT-2", library.tiny_gpt2(), rows, positions)
    assert capsys.readouterr().out.startswith("✓ GPT-2: every row generates what it generates alone")


@pytest.mark.parametrize("name", WRONG_POSITIONS)
def test_gpt2_generate_fails_a_wrong_position_function(rows, name, capsys):
    assert not library.padded_generate("GPT-2", library.tiny_gpt2(), rows, WRONG_POSITIONS[name])
    out = capsys.readouterr().out
    assert out.startswith("✗ GPT-2: row ") and "tokens differ" in out


def test_gpt2_shows_the_wrong_function_as_expected_when_told_so(rows, capsys):
    """The chapter shows the columns' positions on purpose with equal=False: ✓, and the rows named."""
    assert not library.padded_generate(
        "GPT-2", library.tiny_gpt2(), rows, WRONG_POSITIONS["columns, ignoring the pads"], equal=False
    )
    out = capsys.readouterr().out
    assert out.startswith("✓ GPT-2: row 0 (3 pads)") and "row 2 (5 pads)" in out and "row 1" not in out


def test_rope_llama_forgives_a_shift_of_whole_rows(rows):
    """What the chapter says after its Llama cell: the same comparison cannot fail for a row shift."""
    assert library.padded_generate("Llama", library.tiny_llama(), rows, WRONG_POSITIONS["columns, ignoring the pads"])


def test_padded_decode_passes_the_right_decode_positions(rows, capsys):
    right = lambda mask: mask.long().sum(-1, keepdim=True)
    assert library.padded_decode("Llama", library.tiny_llama(), rows, reference.position_ids_from_mask, right)
    assert capsys.readouterr().out.startswith("✓ Llama: every row generates what it generates alone")


@pytest.mark.parametrize("name", WRONG_DECODE)
def test_padded_decode_fails_wrong_decode_positions(rows, name, capsys):
    assert not library.padded_decode(
        "Llama", library.tiny_llama(), rows, reference.position_ids_from_mask, WRONG_DECODE[name]
    )
    assert capsys.readouterr().out.startswith("✗ Llama: row ")
