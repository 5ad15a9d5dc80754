"""argparse's own words ("usage:", "options", "unrecognized arguments: %s") in the user's language.

argparse translates them itself through gettext: it calls the module-level `_` and `ngettext`
it imported from `gettext`, at the moment a parser is built (the "options" group, the -h help
line) and when it prints usage or an error. gettext would look for a compiled `argparse.mo` in
the system's locale folders and choose the language from the environment only, so `--lang`
could not reach it; `install()` points those two names at our catalogue instead (falling back to
gettext for a message we do not have, which is what argparse did before). It must run before the
parser is built, which is why the CLI reads `--lang` from argv before building it.

The msgids are argparse's, verbatim (Python 3.10-3.13), with their %-style placeholders.
"""

from __future__ import annotations

import argparse
import gettext

from stridelens.i18n import N_, ntr, tr

MESSAGES = (
    N_("usage: "),
    N_("positional arguments"),
    N_("options"),
    N_("show this help message and exit"),
    N_("show program's version number and exit"),
    N_("%(prog)s: error: %(message)s\n"),
    N_("unrecognized arguments: %s"),
    N_("the following arguments are required: %s"),
    N_("one of the arguments %s is required"),
    N_("argument %(argument_name)s: %(message)s"),
    N_("not allowed with argument %s"),
    N_("ignored explicit argument %r"),
    N_("invalid choice: %(value)r (choose from %(choices)s)"),
    N_("invalid %(type)s value: %(value)r"),
    N_("expected one argument"),
    N_("expected at most one argument"),
    N_("expected at least one argument"),
    N_("ambiguous option: %(option)s could match %(matches)s"),
    N_("unknown parser %(parser_name)r (choices: %(choices)s)"),
)


def _gettext(message: str) -> str:
    text = tr(message)
    return text if text is not message else gettext.gettext(message)


def _ngettext(singular: str, plural: str, n: int) -> str:
    if singular == "expected %s argument":  # the one plural argparse asks for
        return ntr("expected %s argument", "expected %s arguments", n)
    return gettext.ngettext(singular, plural, n)


def install() -> None:
    """argparse's messages through the stridelens catalogue from now on (idempotent)."""
    argparse._ = _gettext  # type: ignore[attr-defined]
    argparse.ngettext = _ngettext  # type: ignore[attr-defined]
