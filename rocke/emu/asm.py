"""Parse gfx942 assembly text as LLVM prints it: instructions, labels, kernel descriptors
(`.amdhsa_kernel` blocks) and the `.amdgpu_metadata` YAML document. When the assembly has a
line table (`.file` / `.loc` directives, from debug locations in the IR), each instruction
keeps the source line it came from (`Instr.source`), which findings print beside it."""
from __future__ import annotations

import functools
import hashlib
import operator
import re
from dataclasses import dataclass, field

import yaml

from .lru import RecentCache

# libyaml's loader when present (the pure-Python one was a fifth of preparing a launch)
class _MetadataLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """YAML 1.1 with LLVM's `!str` tag (llvm-readelf marks a string that would read as another
    type -- an argument named `n`, `y`, ... -- `!str`): a plain string."""


_MetadataLoader.add_constructor("!str", lambda loader, node: loader.construct_scalar(node))


def load_metadata_yaml(text: str):
    """An `.amdgpu_metadata` document as LLVM's assembly printer or llvm-readelf writes it."""
    return yaml.load(text, Loader=_MetadataLoader)


_LABEL = re.compile(r"^([A-Za-z_.$][\w.$]*):(.*)$")
_SKIP_DIRECTIVE_PREFIXES = (".loc", ".cfi_", ".file", ".section", ".text", ".globl", ".type",
                            ".size", ".set", ".p2alignl", ".fill", ".amdgcn_target",
                            ".amdhsa_code_object_version", ".ident", ".weak", ".local",
                            ".protected", ".hidden", ".addrsig")


@dataclass
class Instr:
    line_no: int
    text: str          # source text (stripped)
    mnemonic: str
    operands: list[str]
    modifiers: list[str]
    index: int = 0     # position in Program.instrs
    address: int | None = None   # byte address in a code object (`.emu_address`), else None
    source: str | None = None    # `file:line` of the last `.loc` before it (debug line info)

    @property
    def at(self) -> str:
        """How findings name this instruction: its assembly line, and the source line the
        assembler's line table (`.file` / `.loc`) gives it, when there is one."""
        return f"line {self.line_no} `{self.text}`" + (f" [{self.source}]" if self.source else "")


@dataclass
class KernelSource:
    name: str
    entry: int                      # instruction index of the symbol
    preload_entry: int | None       # first instruction 256 bytes in (after `.p2align 8`)
    descriptor: dict[str, int] = field(default_factory=dict)
    metadata: dict = field(default_factory=dict)


@dataclass
class Program:
    instrs: list[Instr]
    labels: dict[str, int]
    kernels: dict[str, KernelSource]
    symbols: dict[str, str] = field(default_factory=dict)   # `.set` name -> expression text
    functions: set[str] = field(default_factory=set)        # `.type NAME,@function` symbols

    @property
    def has_addresses(self) -> bool:
        """Every instruction carries its code-object byte address (disassembled code objects)."""
        return bool(self.instrs) and all(i.address is not None for i in self.instrs)


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split on `sep` outside brackets, parentheses and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == '"':
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _split_operands(rest: str) -> tuple[list[str], list[str]]:
    """Operands are comma separated; modifiers follow the last operand, space separated."""
    pieces = split_top_level(rest, ",")
    if not pieces:
        return [], []
    tail = _split_spaces(pieces[-1])
    operands = pieces[:-1]
    if tail and not _looks_like_modifier(tail[0]):
        operands.append(tail[0])
        tail = tail[1:]
    return operands, tail


_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _read_file_directive(line: str, files: dict[int, str]):
    """`.file 1 "dir" "name.py"` or `.file 1 "path"` (an md5 may follow): remember file 1."""
    parts = line.split(None, 2)
    if len(parts) < 3 or not parts[1].isdigit():
        return                     # `.file "name"`: the object's name, not a line-table entry
    names = _QUOTED.findall(parts[2])
    if not names:
        return
    if len(names) >= 2 and not names[1].startswith("/") and names[0]:
        files[int(parts[1])] = names[0].rstrip("/") + "/" + names[1]
    else:
        files[int(parts[1])] = names[1] if len(names) >= 2 and names[1].startswith("/") else names[0]


def _read_loc_directive(line: str, files: dict[int, str]) -> str | None:
    """`.loc FILE LINE [COLUMN] [flags]` -> "path:LINE" (line 0: no source line)."""
    parts = line.split()
    if len(parts) < 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    number, row = int(parts[1]), int(parts[2])
    if row == 0 or number not in files:
        return None
    return f"{files[number]}:{row}"


def _split_spaces(text: str) -> list[str]:
    out, depth, quoted, cur = [], 0, False, ""
    for ch in text:
        if ch == '"':
            quoted = not quoted
        if not quoted and ch in "[(":
            depth += 1
        if not quoted and ch in "])":
            depth -= 1
        if ch.isspace() and depth == 0 and not quoted:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


_MODIFIER_WORDS = {"off", "glc", "slc", "dlc", "nt", "sc0", "sc1", "lds", "offen", "idxen",
                   "addr64", "gds", "clamp", "tfe", "lwe", "da", "r128", "d16"}   # not a16: AGPR a16


_OPERAND_WRAPPERS = re.compile(r"^(?:-|neg\(|abs\(|sext\(|\|)+")


def _looks_like_modifier(tok: str) -> bool:
    if tok == "off":
        return False  # `off` is an operand (no vaddr/saddr)
    # `-v[2:3]`, `|v[2:3]|`, `-|s[4:5]|`: a register range under source modifiers is an operand
    bare = _OPERAND_WRAPPERS.sub("", tok)
    return tok in _MODIFIER_WORDS or (":" in tok and not bare.startswith(("v[", "s[", "a[")))


def _strip_comment(line: str) -> str:
    if ";" not in line and "//" not in line:      # most lines: nothing to strip
        return line
    quoted = False
    for i, ch in enumerate(line):
        if ch == '"':
            quoted = not quoted
        elif not quoted and (ch == ";" or line.startswith("//", i)):
            return line[:i]
    return line


_EXPR_TOKEN = re.compile(r"\s*(?:(0[xX][0-9a-fA-F]+|0[bB][01]+|\d+)|([A-Za-z_.$][\w.$]*)|"
                         r"(<<|>>|<=|>=|==|!=|<>|&&|\|\||[-+*/%&|^~(),!<>]))")
# binary operators of LLVM's MC expressions, GNU flavour (AsmParser getGNUBinOpPrecedence):
# a larger number binds tighter; all are left-associative
_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<>": 3, "<": 3, "<=": 3, ">": 3, ">=": 3,
               "+": 4, "-": 4, "|": 5, "!": 5, "&": 5, "^": 5,
               "*": 6, "/": 6, "%": 6, "<<": 6, ">>": 6}
_MASK64 = (1 << 64) - 1


def _int64(value: int) -> int:
    value &= _MASK64
    return value - (1 << 64) if value >> 63 else value


def _c_quotient(a: int, b: int) -> int:
    """a / b truncated toward zero, as C (and MC) divide."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def _binary(op: str, a: int, b: int, text: str) -> int:
    """MCExpr's evaluation of `a op b` on int64 values (MCExpr::evaluateAsRelocatableImpl):
    comparisons give -1 for true, && and || give 1, >> is logical (MCAsmInfo's default)."""
    if op in ("/", "%"):
        if b == 0:
            raise ValueError(f"division by zero in expression {text!r}")
        q = _c_quotient(a, b)
        return _int64(q if op == "/" else a - b * q)
    if op in ("<<", ">>"):
        if not 0 <= b < 64:
            raise ValueError(f"shift by {b} in expression {text!r} (must be 0-63)")
        return _int64((a & _MASK64) << b if op == "<<" else (a & _MASK64) >> b)
    compare = {"==": a == b, "!=": a != b, "<>": a != b, "<": a < b, "<=": a <= b,
               ">": a > b, ">=": a >= b}
    if op in compare:
        return -1 if compare[op] else 0
    if op == "&&":
        return int(bool(a) and bool(b))
    if op == "||":
        return int(bool(a) or bool(b))
    return _int64({"+": a + b, "-": a - b, "*": a * b, "&": a & b, "|": a | b, "^": a ^ b,
                   "!": a | ~b}[op])


def _alignto(value, alignment):
    return -(-value // alignment) * alignment if alignment else value


def _total_vgprs(agprs, vgprs):
    """Unified gfx90a/gfx942 register file: AGPRs start at the next multiple of 4 after VGPRs."""
    return _alignto(vgprs, 4) + agprs if agprs else vgprs


def _extra_sgprs(vcc, flat_scratch, xnack=0, *_):
    """SGPRs the hardware reserves past the numbered ones (gfx9 rules)."""
    if flat_scratch:
        return 6
    if xnack:
        return 4
    return 2 if vcc else 0


# the function forms LLVM's AMDGPU MC layer prints in `.set` / descriptor expressions
# (AMDGPUMCExpr: `or` is a bitwise or of its arguments, `max` a signed maximum)
_EXPR_FUNCTIONS = {"max": lambda *a: max(a), "min": lambda *a: min(a),
                   "or": lambda *a: functools.reduce(operator.or_, a),
                   "and": lambda *a: int(all(a)),
                   "alignto": _alignto, "totalnumvgprs": _total_vgprs,
                   "extrasgprs": _extra_sgprs}


def _tokens(text: str) -> list[tuple[str, object]]:
    """(kind, value) tokens of an expression: ("num", int), ("name", str), ("op", str)."""
    tokens, pos = [], 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _EXPR_TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"cannot read expression {text!r} at {text[pos:].strip()!r}")
        number, name, op = m.groups()
        pos = m.end()
        if number is not None:
            # LLVM's lexer: 0x hex, 0b binary, a leading 0 octal
            base = 16 if number[:2] in ("0x", "0X") else 2 if number[:2] in ("0b", "0B") \
                else 8 if len(number) > 1 and number[0] == "0" else 10
            try:
                tokens.append(("num", _int64(int(number[2:] if base in (2, 16) else number,
                                                 base))))
            except ValueError:
                raise ValueError(f"bad number {number!r} in expression {text!r}") from None
        elif name is not None:
            tokens.append(("name", name))
        else:
            tokens.append(("op", op))
    return tokens


def evaluate_expression(text: str, symbols: dict[str, str], _depth: int = 0) -> int:
    """Value of an assembler integer expression (`max(32, .Lf.num_vgpr)`, `k.private_seg_size`,
    `((a&~65536)&63)+1`, `(k.private_seg_size>0)||k.has_dyn_sized_stack`) whose symbols are
    `.set` definitions in `symbols`, with the operators, precedence and int64 arithmetic of
    LLVM's MC expressions."""
    if _depth > 64:
        raise ValueError(f"`.set` definitions are circular around {text!r}")
    tokens = _tokens(text.strip())
    pos = 0

    def peek():
        return tokens[pos] if pos < len(tokens) else ("end", None)

    def take(kind, value=None):
        nonlocal pos
        token = peek()
        if token[0] != kind or (value is not None and token[1] != value):
            shown = "the end" if token[0] == "end" else repr(token[1])
            raise ValueError(f"malformed expression {text!r}: expected "
                             f"{value or kind!r}, found {shown}")
        pos += 1
        return token[1]

    def primary() -> int:
        kind, value = peek()
        if kind == "num":
            return take("num")
        if kind == "op" and value in ("-", "+", "~", "!"):
            take("op")
            operand = primary()
            return {"-": _int64(-operand), "+": operand, "~": _int64(~operand),
                    "!": int(not operand)}[value]
        if kind == "op" and value == "(":
            take("op", "(")
            result = expression(1)
            take("op", ")")
            return result
        if kind == "name":
            take("name")
            if value in _EXPR_FUNCTIONS and peek() == ("op", "("):
                take("op", "(")
                args = [expression(1)]
                while peek() == ("op", ","):
                    take("op", ",")
                    args.append(expression(1))
                take("op", ")")
                try:
                    return _int64(int(_EXPR_FUNCTIONS[value](*args)))
                except TypeError:
                    raise ValueError(f"{value}() in expression {text!r} cannot take "
                                     f"{len(args)} arguments") from None
            if value in symbols:
                return evaluate_expression(symbols[value], symbols, _depth + 1)
            raise ValueError(f"expression {text!r} uses the undefined symbol {value!r}")
        shown = "the end" if kind == "end" else repr(value)
        raise ValueError(f"malformed expression {text!r}: unexpected {shown}")

    def binary_rest(minimum: int, lhs: int) -> int:
        # precedence climbing, as LLVM's AsmParser::parseBinOpRHS
        while True:
            kind, op = peek()
            precedence = _PRECEDENCE.get(op, 0) if kind == "op" else 0
            if precedence < minimum or precedence == 0:
                return lhs
            take("op")
            rhs = primary()
            kind, after = peek()
            if kind == "op" and precedence < _PRECEDENCE.get(after, 0):
                rhs = binary_rest(precedence + 1, rhs)
            lhs = _binary(op, lhs, rhs, text)

    def expression(minimum: int) -> int:
        return binary_rest(minimum, primary())

    result = expression(1)
    if pos != len(tokens):
        raise ValueError(f"malformed expression {text!r}: unexpected {peek()[1]!r}")
    return result


_PARSED: RecentCache[Program] = RecentCache(32)


def parsed_program(text: str, digest: str | None = None) -> Program:
    """``parse_program(text)``, kept for the process's last few texts by their sha256 (``digest``
    when the caller has it): the check that a listing is its code object's kernel and the launch
    that then runs it read the same text (a Program is never changed once parsed)."""
    if not isinstance(text, str):
        return parse_program(text)
    digest = digest or hashlib.sha256(text.encode()).hexdigest()
    return _PARSED.get_or_make(digest, lambda: parse_program(text))


def parse_program(text: str) -> Program:
    if not isinstance(text, str) or not text.strip():
        raise ValueError("assembly text is empty or not a string")
    instrs: list[Instr] = []
    labels: dict[str, int] = {}
    descriptors: dict[str, dict[str, int]] = {}
    align256_marks: list[int] = []
    metadata_lines: list[str] | None = None
    metadata_text = None
    current_descriptor: dict[str, int] | None = None
    symbols: dict[str, str] = {}
    pending: list[tuple[dict, str, str, int]] = []   # descriptor values that are expressions
    next_address: int | None = None
    functions: set[str] = set()
    files: dict[int, str] = {}        # `.file N "dir" "name"` (DWARF line table)
    source: str | None = None         # the current `.loc`
    for line_no, raw in enumerate(text.splitlines(), start=1):
        if metadata_lines is not None:
            if raw.strip() == ".end_amdgpu_metadata":
                metadata_text, metadata_lines = "\n".join(metadata_lines), None
            else:
                metadata_lines.append(raw)
            continue
        line = _strip_comment(raw).strip()
        if not line:
            continue
        if current_descriptor is not None:
            if line == ".end_amdhsa_kernel":
                current_descriptor = None
                continue
            key, _, value = line.partition(" ")
            if not value.strip():
                raise ValueError(f"line {line_no}: malformed descriptor directive {line!r}")
            try:
                current_descriptor[key.lstrip(".")] = int(value.strip(), 0)
            except ValueError:   # an expression over `.set` symbols, defined anywhere in the file
                pending.append((current_descriptor, key.lstrip("."), value.strip(), line_no))
            continue
        while True:
            m = _LABEL.match(line)
            if not m:
                break
            labels[m.group(1)] = len(instrs)
            line = m.group(2).strip()
        if not line:
            continue
        if line.startswith("."):
            head = line.split()[0]
            if head == ".type" and line.replace(" ", "").endswith(",@function"):
                functions.add(line.split(None, 1)[1].split(",")[0].strip())
            elif head == ".file":
                _read_file_directive(line, files)
            elif head == ".loc":
                source = _read_loc_directive(line, files)
            elif head == ".emu_address":   # codeobject.py: the byte address of the next instruction
                next_address = int(line.split()[1], 0)
            elif head == ".set":
                name, _, expression = line[4:].strip().partition(",")
                if not expression.strip():
                    raise ValueError(f"line {line_no}: malformed {line!r}")
                symbols[name.strip()] = expression.strip()
            elif head == ".amdgpu_metadata":
                metadata_lines = []
            elif head == ".amdhsa_kernel":
                parts = line.split()
                if len(parts) != 2:
                    raise ValueError(f"line {line_no}: malformed {line!r}")
                current_descriptor = descriptors.setdefault(parts[1], {})
            elif head in (".p2align", ".align", ".balign"):
                args = line.split(None, 1)[1].split(",")
                if int(args[0], 0) >= 8:
                    align256_marks.append(len(instrs))
            continue
        mnemonic, _, rest = line.partition(" ")
        if not re.fullmatch(r"[a-z][a-z0-9_]*", mnemonic):
            raise ValueError(f"line {line_no}: malformed instruction {line!r}")
        operands, modifiers = _split_operands(rest.strip())
        instrs.append(Instr(line_no, line, mnemonic, operands, modifiers, len(instrs), next_address,
                            source))
        next_address = None
    if metadata_lines is not None:
        raise ValueError("`.amdgpu_metadata` block is not terminated by `.end_amdgpu_metadata`")
    if current_descriptor is not None:
        raise ValueError("`.amdhsa_kernel` block is not terminated by `.end_amdhsa_kernel`")
    for descriptor, key, expression, line_no in pending:
        try:
            descriptor[key] = evaluate_expression(expression, symbols)
        except ValueError as err:
            raise ValueError(f"line {line_no}: descriptor directive .{key}: {err}") from None
    if metadata_text is None:
        raise ValueError("assembly has no `.amdgpu_metadata` block (kernel metadata YAML)")
    try:
        metadata = load_metadata_yaml(metadata_text)
    except yaml.YAMLError as err:
        raise ValueError(f"malformed `.amdgpu_metadata` YAML: {err}") from None
    kernels = {}
    for entry in (metadata or {}).get("amdhsa.kernels", []) or []:
        name = entry.get(".name")
        if name not in labels:
            raise ValueError(f"kernel {name!r} in metadata has no code label in the assembly")
        if name not in descriptors:
            raise ValueError(f"kernel {name!r} has no `.amdhsa_kernel` descriptor block")
        entry_index = labels[name]
        preload_entry = next((m for m in align256_marks if m > entry_index), None)
        kernels[name] = KernelSource(name, entry_index, preload_entry, descriptors[name], entry)
    if not kernels:
        raise ValueError("assembly metadata lists no kernels (`amdhsa.kernels` is empty)")
    return Program(instrs, labels, kernels, symbols, functions)
