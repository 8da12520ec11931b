"""`agentd completion bash|zsh`: a shell completion script generated from agentd's own argparse tree
when asked for, so it names every command, option and choice the parser has and never drifts.

The script is a table (command path -> subcommands, options, an option's choices) and one small
function that walks the words typed so far through it. Nothing here runs unless this command does."""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, field
from typing import Any

from agentd.cli.common import add_command

SHELLS = ("bash", "zsh")


def register(commands: Any) -> None:
    completion = add_command(
        commands, "completion", cmd_completion, "print a shell completion script: source <(agentd completion bash)"
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete for")


def cmd_completion(args: argparse.Namespace) -> int:
    tree = command_tree(args.root_parser)  # the whole tree, as `agentd` itself built it
    print(bash_script(tree) if args.shell == "bash" else zsh_script(tree), end="")
    return 0


@dataclass
class Node:
    """One command's words: `commands` extend the path, `words` are a positional's choices, `values`
    maps each option that takes a value to its choices (empty: anything, the shell completes files)."""

    commands: list[str] = field(default_factory=list)
    words: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)
    values: dict[str, list[str]] = field(default_factory=dict)


def command_tree(parser: argparse.ArgumentParser, path: str = "agentd") -> dict[str, Node]:
    """Every command path (`agentd`, `agentd task`, `agentd task add`, …) with its words."""
    node, tree = Node(), {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                node.commands.append(name)
                tree.update(command_tree(sub, f"{path} {name}"))
        elif action.option_strings:
            node.options += action.option_strings
            if action.nargs != 0:
                node.values.update({option: [str(c) for c in action.choices or ()] for option in action.option_strings})
        elif action.choices:
            node.words += [str(choice) for choice in action.choices]
    return {path: node, **tree}


def _tables(tree: dict[str, Node], entry: str) -> list[str]:
    """The four tables as shell assignments; `entry` formats one key/value pair."""
    tables: dict[str, dict[str, str]] = {"commands": {}, "words": {}, "options": {}, "values": {}}
    for path, node in tree.items():
        tables["commands"][path] = " ".join(node.commands)
        tables["words"][path] = " ".join(node.words)
        tables["options"][path] = " ".join(node.options)
        for option, choices in node.values.items():
            tables["values"][f"{path} {option}"] = " ".join(choices)
    return [
        f"_agentd_{name}=(\n" + "".join(entry.format(k=shlex.quote(k), v=shlex.quote(v)) for k, v in rows.items()) + ")"
        for name, rows in tables.items()
    ]


BASH = """\
# bash completion for agentd, generated from its own parser by `agentd completion bash`.
# Use it with: source <(agentd completion bash)    (in ~/.bashrc to keep it)
declare -gA _agentd_commands _agentd_words _agentd_options _agentd_values
{tables}

_agentd() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" cmdpath=agentd word key i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        if [[ -n "${{_agentd_values["$cmdpath $word"]+set}}" ]]; then
            ((i++))  # the option's value
        elif [[ " ${{_agentd_commands[$cmdpath]}} " == *" $word "* ]]; then
            cmdpath="$cmdpath $word"
        fi
    done
    key="$cmdpath ${{COMP_WORDS[COMP_CWORD - 1]}}"
    if ((COMP_CWORD > 1)) && [[ -n "${{_agentd_values[$key]+set}}" ]]; then
        # an option's value: its choices, else nothing here and bash completes file names
        COMPREPLY=($(compgen -W "${{_agentd_values[$key]}}" -- "$cur"))
    elif [[ "$cur" == -* ]]; then
        COMPREPLY=($(compgen -W "${{_agentd_options[$cmdpath]}}" -- "$cur"))
    else
        COMPREPLY=($(compgen -W "${{_agentd_commands[$cmdpath]}} ${{_agentd_words[$cmdpath]}}" -- "$cur"))
    fi
}}
complete -o default -F _agentd agentd
"""

ZSH = """\
#compdef agentd
# zsh completion for agentd, generated from its own parser by `agentd completion zsh`.
# Use it with: agentd completion zsh > ~/.zfunc/_agentd (~/.zfunc in fpath, before compinit), or
# source <(agentd completion zsh) after compinit.
typeset -gA _agentd_commands _agentd_words _agentd_options _agentd_values
{tables}

_agentd() {{
    local cmdpath=agentd word key i
    for (( i = 2; i < CURRENT; i++ )); do
        word=${{words[i]}}
        if (( ${{+_agentd_values[$cmdpath $word]}} )); then
            (( i++ ))  # the option's value
        elif [[ " ${{_agentd_commands[$cmdpath]}} " == *" $word "* ]]; then
            cmdpath="$cmdpath $word"
        fi
    done
    key="$cmdpath ${{words[CURRENT-1]}}"
    if (( CURRENT > 2 && ${{+_agentd_values[$key]}} )); then
        if [[ -n ${{_agentd_values[$key]}} ]]; then compadd -- ${{=_agentd_values[$key]}}; else _files; fi
    elif [[ ${{words[CURRENT]}} == -* ]]; then
        compadd -- ${{=_agentd_options[$cmdpath]}}
    elif [[ -n "${{_agentd_commands[$cmdpath]}}${{_agentd_words[$cmdpath]}}" ]]; then
        compadd -- ${{=_agentd_commands[$cmdpath]}} ${{=_agentd_words[$cmdpath]}}
    else
        _files
    fi
}}

if [[ ${{zsh_eval_context[-1]}} == loadautofunc ]]; then
    _agentd "$@"
else
    compdef _agentd agentd
fi
"""


def bash_script(tree: dict[str, Node]) -> str:
    return BASH.format(tables="\n".join(_tables(tree, "    [{k}]={v}\n")))


def zsh_script(tree: dict[str, Node]) -> str:
    return ZSH.format(tables="\n".join(_tables(tree, "    {k} {v}\n")))
