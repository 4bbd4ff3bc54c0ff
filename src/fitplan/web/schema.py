"""The JSON API's request schema: each endpoint's fields, generated from the declarations the
CLI's flags come from (fitplan.request.api_flags: a request key is a flag without its dashes),
and the check of a JSON body's types before fitplan sees it.

The types are checked here (a whole number, text, a list); the meaning (ranges, choices, units,
presets) is fitplan's own check, shared with the CLI, so its one line reaches the page. No field
names a path on the server's disk: the declarations mark --spec, --hf-config, --gpu-spec, --plot
and --output as not for the API; a pasted config.json travels as text (hf_config).
"""
import json
import re

HF_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
HF_FIELDS = ("hf_config", "hf_name")   # the pasted config.json (text or object) and its folder name
MAX_TEXT = 100                         # characters in a text field
MAX_ITEMS = 64                         # items in a list field
# endpoint -> (the command it answers, the output format it asks for)
ENDPOINTS = {"plan": ("plan", "json"), "markdown": ("plan", "markdown"), "sweep": ("sweep", "json"),
             "export": ("export", None), "compare": ("compare", "json"), "infer": ("infer", "json")}


class RequestError(Exception):
    """A request the server refuses before fitplan sees it: (HTTP status, one line)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def schema(endpoint: str) -> dict:
    """Request key -> fitplan.specs.declare.Flagged, for one endpoint: every declared flag
    of its command that the API takes."""
    from fitplan.request import api_flags
    flags = api_flags(ENDPOINTS[endpoint][0])
    for f in list(flags.values()):
        if f.off_key is not None:     # "no_dropout": true is "dropout": false, as the flag --no-dropout
            flags[f.off_key] = f
    return flags


def fields_payload() -> dict:
    """GET /api/fields: each endpoint's fields, for the page's form and for clients."""
    from fitplan.specs.declare import UNIT_KINDS
    out = {}
    for endpoint in ENDPOINTS:
        items = []
        for key, f in schema(endpoint).items():
            if key == f.off_key:
                continue
            d = f.decl
            items.append({"key": key, "flag": f.flag, "off_flag": f.off_flag, "kind": d.kind, "group": d.group,
                          "help": d.help, "root": f.path[0],
                          "unit": d.unit or UNIT_KINDS.get(d.kind, ""),
                          "choices": list(map(str, d.choice_values)) or None, "min": d.lo, "max": d.hi,
                          "required": f.required,
                          "example": _plain(d.example)})
        out[endpoint] = items
    return out


def _plain(value):
    from fitplan.specs.declare import enum_value
    return list(value) if isinstance(value, tuple) else enum_value(value)


def _type_name(value) -> str:
    return {bool: "true/false", int: "a whole number", float: "a number", str: "text", list: "a list",
            dict: "an object", type(None): "null"}.get(type(value), type(value).__name__)


def _show(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _bad_type(name: str, what: str, value) -> RequestError:
    return RequestError(400, f"request: '{name}' must be {what}, got {_type_name(value)} {_show(value)}")


def _int(name: str, value) -> int:
    if isinstance(value, float) and value.is_integer():
        return int(value)      # JSON 16.0 is 16
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad_type(name, "a whole number", value)
    return value


def _text(name: str, value) -> str:
    if not isinstance(value, str):
        raise _bad_type(name, "text", value)
    if not value.strip():
        raise RequestError(400, f"request: '{name}' is empty; leave it out or give a value")
    if len(value) > MAX_TEXT:
        raise RequestError(400, f"request: '{name}' is longer than {MAX_TEXT} characters")
    if not value.isprintable():
        raise RequestError(400, f"request: '{name}' holds a control character or line break; remove it")
    return value


def _bool(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise _bad_type(name, "true or false", value)
    return value


def _number(name: str, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad_type(name, "a number", value)
    return value


def _count(name: str, value):
    """A count: a whole number, or text with a suffix ("15T"), read by fitplan.units.parse_count."""
    return _int(name, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _text(name, value)


def _ints(name: str, value) -> tuple:
    if not isinstance(value, list) or not value:
        raise _bad_type(name, "a non-empty list of whole numbers", value)
    if len(value) > MAX_ITEMS:
        raise RequestError(400, f"request: '{name}' has {len(value)} items; give at most {MAX_ITEMS}")
    return tuple(_int(f"{name}[{i}]", v) for i, v in enumerate(value))


def _choice(name: str, value):
    """A choice's value is checked against its declaration by fitplan (the CLI's line); here its type."""
    return _int(name, value) if isinstance(value, (int, float)) and not isinstance(value, bool) else _text(name, value)


# JSON type per declared kind; the meaning (ranges, choices, units, presets) is fitplan's own check,
# shared with the CLI, so its one line reaches the page.
_READ = {"int": _int, "number": _number, "str": _text, "size": _text, "rate": _text, "seconds": _text,
         "power": _text, "count": _count, "recipe": _text, "gpu": _text, "enum": _text, "choice": _choice, "bool": _bool, "moments": _number,
         "ints": _ints}


def _hf_part(body: dict) -> tuple[str | None, str]:
    """The pasted config.json as text, and the name it is read under (the model's name)."""
    name = body.get("hf_name")
    if name is None:
        name = "hf-model"
    elif not isinstance(name, str) or not HF_NAME.fullmatch(name):
        raise RequestError(400, "request: 'hf_name' must be 1 to 64 letters, digits, '.', '_' or '-', "
                                "starting with a letter or digit")
    config = body.get("hf_config")
    if config is None:
        return None, name
    if isinstance(config, dict):
        return json.dumps(config, indent=2), name
    if isinstance(config, str):
        if not config.strip():
            raise RequestError(400, "request: 'hf_config' is empty; paste the contents of a config.json")
        return config, name
    raise RequestError(400, f"request: 'hf_config' must be the text of a config.json or a JSON object, "
                            f"got {_type_name(config)}")


def build_request(endpoint: str, body):
    """The fitplan.request.Request for a JSON body. Raises RequestError(400) on a bad body."""
    from fitplan.request import Request
    if not isinstance(body, dict):
        raise RequestError(400, f"request: the body must be a JSON object {{...}}, got {_type_name(body)}")
    flags = schema(endpoint)
    allowed = set(flags) | set(HF_FIELDS)
    unknown = sorted(k for k in body if k not in allowed)
    if unknown:
        raise RequestError(400, f"request: unknown field {unknown[0]!r}; allowed: {', '.join(sorted(allowed))}")
    command, fmt = ENDPOINTS[endpoint]
    values = {}
    for key, f in flags.items():
        value = body.get(key)
        if value is None:
            continue
        value = _READ[f.decl.kind](key, value)
        if key == f.off_key:      # "no_dropout": true -> dropout false; false says nothing
            if value:
                values[f.key] = False
            continue
        if f.decl.kind == "bool" and f.off_key is None and not value:
            continue              # a store-true flag given as false is the flag left out
        values[f.key] = value
    missing = [key for key, f in flags.items() if f.required and key not in values]
    if missing:
        choices = ", ".join(map(str, flags[missing[0]].decl.choice_values))
        raise RequestError(400, f"request: '{missing[0]}' is required: {choices}")
    if fmt is not None:
        values["format"] = fmt
    hf_text, hf_name = _hf_part(body)
    return Request(command=command, values=values, hf_text=hf_text, hf_name=hf_name)



def no_constants(name):
    """json.loads' parse_constant: NaN, Infinity and -Infinity are not JSON numbers."""
    raise ValueError(f"{name} is not a JSON number")
