"""rdq_compliance.provision.options: the one parser of ``--rdq-option`` rung options.

What it is held to: an absent option takes its declared default; a given one is converted
to the declared type; a bad value is an ``InvalidArgument`` that names the option as the
user wrote it (``--rdq-option key=value``), what is expected, what the option means and
its default; a bad declaration is a ``TypeError`` at once.
"""

from __future__ import annotations

import math
import os

import pytest

from rdq_compliance.provision.options import (
    OPTION_TYPES,
    Paths,
    RungOptions,
    option,
)
from rdq_core.errors import InvalidArgument

BIN_DIR = option("x_bin_dir", Paths, None, "folders holding the server")
USER = option("x_user", str, "xserver", "the system user to run as")
MAX = option("x_max_connections", int, 200, "max connections", positive=True)
TIMEOUT = option("x_start_timeout", float, 60, "seconds to wait for the server", positive=True)
OFFSET = option("x_offset", float, -1.5, "a number that may be negative")
FSYNC = option("x_fsync", bool, False, "flush to disk")
RUNG = RungOptions("x local binaries", [BIN_DIR, USER, MAX, TIMEOUT, OFFSET, FSYNC])


# ---- defaults and values ---------------------------------------------------------------


def test_absent_options_take_their_defaults() -> None:
    values = RUNG.parse({})
    assert values[BIN_DIR] is None
    assert values[USER] == "xserver"
    assert values[MAX] == 200 and type(values[MAX]) is int
    assert values[TIMEOUT] == 60.0 and type(values[TIMEOUT]) is float  # an int default
    assert values[OFFSET] == -1.5
    assert values[FSYNC] is False
    assert not any(values.given(o) for o in RUNG)


def test_given_options_are_converted_to_their_types() -> None:
    values = RUNG.parse(
        {
            "x_bin_dir": os.pathsep.join(["/opt/a", "", " ", "/opt/b"]),
            "x_user": "someone",
            "x_max_connections": " 50 ",
            "x_start_timeout": "2.5",
            "x_offset": "-3",
            "x_fsync": "Yes",
        }
    )
    assert values[BIN_DIR] == ("/opt/a", "/opt/b") and isinstance(values[BIN_DIR], Paths)
    assert values[USER] == "someone"
    assert values[MAX] == 50
    assert values[TIMEOUT] == 2.5
    assert values[OFFSET] == -3.0
    assert values[FSYNC] is True
    assert all(values.given(o) for o in RUNG)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", True), ("true", True), ("ON", True), ("0", False), ("no", False), ("off", False)],
)
def test_flags_take_the_usual_spellings(text: str, expected: bool) -> None:
    assert FSYNC.read({"x_fsync": text}) is expected


def test_values_that_are_not_strings_are_read_as_their_text() -> None:
    values = RUNG.parse({"x_max_connections": 7, "x_start_timeout": 1, "x_fsync": True})
    assert (values[MAX], values[TIMEOUT], values[FSYNC]) == (7, 1.0, True)


def test_an_empty_value_means_the_default_for_a_string_and_no_folders_for_paths() -> None:
    values = RUNG.parse({"x_user": "", "x_bin_dir": ""})
    assert values[USER] == "xserver"
    assert values[BIN_DIR] == () and values.given(BIN_DIR)  # given: search no folder


def test_keys_the_rung_does_not_declare_are_left_alone() -> None:
    values = RUNG.parse({"other_rung_image": "whatever:1", "pool": "16"})
    assert values.as_dict() == RUNG.parse({}).as_dict()


def test_an_option_the_rung_does_not_declare_cannot_be_read_from_its_values() -> None:
    stranger = option("x_image", str, "img", "an image")
    with pytest.raises(KeyError, match="x_image"):
        RUNG.parse({})[stranger]


def test_describe_lists_every_option_with_what_it_expects_and_its_default() -> None:
    text = RUNG.describe()
    assert text.startswith("x local binaries options (--rdq-option KEY=VALUE):")
    assert "x_start_timeout" in text and "a positive number; default 60)" in text
    assert "x_bin_dir" in text and "default not set" in text
    assert "x_user" in text and "default 'xserver'" in text


# ---- bad values ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("opt", "text", "expected"),
    [
        (TIMEOUT, "soon", "a positive number"),
        (TIMEOUT, "0", "a positive number"),
        (TIMEOUT, "-5", "a positive number"),
        (TIMEOUT, "nan", "a positive number"),
        (TIMEOUT, "inf", "a positive number"),
        (TIMEOUT, "", "a positive number"),
        (MAX, "2.5", "a positive whole number"),
        (MAX, "many", "a positive whole number"),
        (OFFSET, "left", "a number"),
        (FSYNC, "maybe", "true or false (1/0, yes/no, on/off)"),
    ],
)
def test_a_bad_value_names_the_option_and_what_is_expected(opt, text, expected) -> None:
    with pytest.raises(InvalidArgument) as info:
        RUNG.parse({opt.name: text})
    message = str(info.value)
    assert message.startswith(f"--rdq-option {opt.name}={text!r}: expected {expected} (")
    assert opt.help in message
    assert f"default {opt.show_default()}" in message


def test_the_error_reads_as_a_sentence() -> None:
    with pytest.raises(InvalidArgument) as info:
        TIMEOUT.read({"x_start_timeout": "soon"})
    assert str(info.value) == (
        "--rdq-option x_start_timeout='soon': expected a positive number "
        "(seconds to wait for the server; default 60)"
    )


# ---- bad declarations ------------------------------------------------------------------


def test_an_unknown_type_is_refused_naming_the_supported_ones() -> None:
    with pytest.raises(TypeError) as info:
        option("x_table", dict, {}, "a mapping")
    message = str(info.value)
    assert "option 'x_table': unsupported type dict" in message
    for kind in OPTION_TYPES:
        assert kind.__name__ in message


@pytest.mark.parametrize(
    ("kind", "default", "shown"),
    [
        (float, "sixty", "default 'sixty' is str, not float"),
        (int, True, "default True is bool, not int"),
        (int, 2.5, "default 2.5 is float, not int"),
        (str, 5, "default 5 is int, not str"),
        (bool, "yes", "default 'yes' is str, not bool"),
        (Paths, "/opt/bin", "default '/opt/bin' is str, not Paths"),
    ],
)
def test_a_default_of_another_type_is_refused(kind, default, shown) -> None:
    with pytest.raises(TypeError, match=shown):
        option("x_opt", kind, default, "something")


def test_paths_may_default_to_a_list_of_folders() -> None:
    folders = option("x_dirs", Paths, ["/a", "/b"], "folders")
    assert folders.read({}) == ("/a", "/b") and isinstance(folders.read({}), Paths)


def test_positive_is_for_numbers_with_a_positive_default() -> None:
    with pytest.raises(TypeError, match="positive=True needs an int or float"):
        option("x_name", str, "a", "a name", positive=True)
    with pytest.raises(TypeError, match="default 0 is not positive"):
        option("x_count", int, 0, "a count", positive=True)
    assert option("x_count", int, None, "a count", positive=True).read({}) is None


@pytest.mark.parametrize("name", ["", "Pg_User", "pg-user", "1st", "pg user"])
def test_option_names_are_what_the_environment_spells(name: str) -> None:
    # RDQ_OPTION_<KEY> is lower-cased into the key: only lower-case keys are reachable.
    with pytest.raises(TypeError, match="lower-case"):
        option(name, str, "", "x")


def test_a_rung_cannot_declare_one_option_twice() -> None:
    with pytest.raises(TypeError, match="declared twice: x_user"):
        RungOptions("x", [USER, option("x_user", str, "other", "again")])


def test_show_default_prints_whole_floats_without_a_fraction() -> None:
    assert TIMEOUT.show_default() == "60"
    assert OFFSET.show_default() == "-1.5"
    assert math.isclose(TIMEOUT.default, 60.0)
