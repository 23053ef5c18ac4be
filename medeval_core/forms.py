"""Launch forms built from a benchmark's ``Params`` (pydantic): one ``FieldSpec`` per field, with its default, its
limits and its description as help, and the form's values validated back into the model. A page lays the specs
out as widgets and hands the values back; it decides nothing.

A ``Params`` that is a ``RootModel`` over a discriminated union (one model per stage of a run) is a form per variant:
``form_variants`` names them and ``field_specs(model, variant=...)`` gives that variant's fields.

Fields mark where their value comes from with ``json_schema_extra={"input": "file"}`` (or ``"folder"``): the form
then suggests the files (or folders) of the benchmark's data sources under ``MEDEVAL_DATA_DIR``;
``{"in_form": False}`` leaves out a field that ``Benchmark.prepare_params`` derives.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from enum import Enum
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt
from pydantic import BaseModel, RootModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from medeval_core.data.files import json_value

FieldKind = Literal["integer", "number", "boolean", "choice", "text", "json"]
InputSource = Literal["file", "folder"]


class FormError(ValueError):
    """A form's values do not make valid parameters; the message names each field and what to change."""


class FieldSpec(BaseModel):
    """One form field: the widget kind, whether it may be left empty, its default, limits, choices and help."""

    name: str
    label: str
    kind: FieldKind
    required: bool
    optional: bool
    """The field accepts None (an empty widget means "not set")."""
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    suggestions: tuple[str, ...] = ()
    """Values offered beside free entry (a data source's files, the examples the field declares)."""
    source: InputSource | None = None
    help: str = ""


def _strip_optional(annotation: Any) -> tuple[Any, bool]:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        args = [arg for arg in get_args(annotation) if arg is not type(None)]
        if len(args) < len(get_args(annotation)):
            return (args[0] if len(args) == 1 else Union[tuple(args)]), True  # noqa: UP007 - built at runtime
    return annotation, False


def _kind(annotation: Any) -> tuple[FieldKind, tuple[str, ...]]:
    if get_origin(annotation) is Literal:
        return "choice", tuple(str(value) for value in get_args(annotation))
    if isinstance(annotation, type) and issubclass(annotation, Enum):
        return "choice", tuple(str(member.value) for member in annotation)
    if annotation is bool:
        return "boolean", ()
    if annotation is int:
        return "integer", ()
    if annotation is float:
        return "number", ()
    if annotation is str:
        return "text", ()
    return "json", ()  # dicts, lists and nested models are entered as JSON


def _limits(info: FieldInfo) -> tuple[float | None, float | None]:
    low = high = None
    for item in info.metadata:
        if isinstance(item, Ge | Gt):
            low = float(item.ge if isinstance(item, Ge) else item.gt)  # type: ignore[arg-type]
        elif isinstance(item, Le | Lt):
            high = float(item.le if isinstance(item, Le) else item.lt)  # type: ignore[arg-type]
    return low, high


def _default(info: FieldInfo) -> Any:
    if info.default is not PydanticUndefined:
        value = info.default
    elif info.default_factory is not None:
        value = info.default_factory()  # type: ignore[call-arg]
    else:
        return None
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    return value.value if isinstance(value, Enum) else value


def _variants(model: type[BaseModel]) -> dict[str, type[BaseModel]]:
    """A RootModel over a discriminated union: discriminator value -> variant model; {} for a plain model."""
    if not issubclass(model, RootModel):
        return {}
    info = model.model_fields["root"]
    discriminator = info.discriminator
    members = get_args(_strip_optional(info.annotation)[0]) or (info.annotation,)
    if not isinstance(discriminator, str):
        return {}
    variants = {}
    for member in members:
        tag = member.model_fields[discriminator].default
        variants[str(tag)] = member
    return variants


def form_variants(model: type[BaseModel]) -> list[str]:
    """The variants a form offers (a benchmark's stages), [] when ``model`` is one plain form. A variant whose model
    config says ``json_schema_extra={"launchable": False}`` (a page's interactive session) is left out."""
    return [name for name, variant in _variants(model).items()
            if not isinstance(extra := variant.model_config.get("json_schema_extra"), dict)
            or extra.get("launchable", True)]


def _form_model(model: type[BaseModel], variant: str | None) -> tuple[type[BaseModel], str | None]:
    variants = _variants(model)
    if not variants:
        return model, None
    if variant not in variants:
        raise FormError(f"Choose one of {', '.join(variants)} for {model.__name__}.")
    discriminator = model.model_fields["root"].discriminator
    return variants[variant], str(discriminator)


def field_specs(model: type[BaseModel], *, variant: str | None = None, exclude: Sequence[str] = (),
                data_folders: Sequence[Path] = (), defaults: Mapping[str, Any] | None = None) -> list[FieldSpec]:
    """The form of ``model`` (or of its ``variant``), in declaration order. ``data_folders`` are the benchmark's
    data-source folders, searched for a field marked ``input: file`` or ``input: folder``; ``defaults`` fill
    fields the model gives no default (``Benchmark.form_defaults``)."""
    form, discriminator = _form_model(model, variant)
    specs = []
    for name, info in form.model_fields.items():
        if name in exclude or name == discriminator:
            continue
        annotation, optional = _strip_optional(info.annotation)
        kind, choices = _kind(annotation)
        low, high = _limits(info)
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        if extra.get("in_form") is False:
            continue  # derived when the run is prepared (``Benchmark.prepare_params``), not asked for
        source: InputSource | None = extra.get("input") if extra.get("input") in ("file", "folder") else None  # type: ignore[assignment]
        suggestions = [str(value) for value in (info.examples or [])]
        if source is not None:
            suggestions += _data_entries(data_folders, source)
        default = _default(info)
        if default in (None, "") and defaults and name in defaults:  # "" too: an empty path the run fills in
            default = defaults[name]
        if default is None and info.is_required() and suggestions:
            default = suggestions[0]
        specs.append(FieldSpec(
            name=name, label=name.replace("_", " "), kind=kind, required=info.is_required(), optional=optional,
            default=default, minimum=low, maximum=high, choices=choices, suggestions=tuple(suggestions),
            source=source, help=info.description or "",
        ))
    return specs


def _data_entries(folders: Sequence[Path], source: str) -> list[str]:
    entries: list[str] = []
    for folder in folders:
        if not folder.is_dir():
            continue
        if source == "folder":
            entries.append(str(folder.resolve()))
            entries += sorted(str(p.resolve()) for p in folder.rglob("*") if p.is_dir())
        else:
            entries += sorted(str(p.resolve()) for p in folder.rglob("*")
                              if p.is_file() and not p.name.startswith(".") and p.suffix.lower() != ".md")
    return entries


def _coerce(spec: FieldSpec, value: Any) -> Any:
    """A widget's value as the model expects it: an empty entry is None (not set), JSON is parsed."""
    if isinstance(value, str):
        value = value.strip()
        if value == "":
            return None  # not set: the default applies, or the field is reported as required
        if spec.kind == "json":
            try:
                return json_value(value)
            except ValueError as exc:
                raise FormError(f"{spec.label}: {exc}; enter a JSON value such as {{}} or [].") from None
    return value


def validate_form(model: type[BaseModel], values: Mapping[str, Any], *, variant: str | None = None,
                  specs: Sequence[FieldSpec] | None = None) -> BaseModel:
    """``values`` (field name -> widget value) as a validated ``model``; a ``FormError`` names every field that
    is wrong, in one sentence each, and nothing else happens."""
    _, discriminator = _form_model(model, variant)
    by_name = {spec.name: spec for spec in (specs if specs is not None else field_specs(model, variant=variant))}
    raw: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in values.items():
        spec = by_name.get(name)
        try:
            coerced = _coerce(spec, value) if spec is not None else value
        except FormError as exc:
            problems.append(str(exc))
            continue
        if coerced is not None or (spec is not None and spec.optional):
            raw[name] = coerced
    if problems:
        raise FormError(" ".join(problems))
    if discriminator is not None:
        raw[discriminator] = variant
    try:
        return model.model_validate(raw)
    except ValidationError as exc:
        raise FormError(describe_validation_error(exc, by_name, variant=variant)) from None


def describe_validation_error(exc: ValidationError, specs: Mapping[str, FieldSpec] | None = None,
                              variant: str | None = None) -> str:
    """One sentence per invalid field, named as the form labels it (``limit: must be at least 1.``)."""
    sentences = []
    for error in exc.errors():
        location = [str(part) for part in error["loc"] if not str(part).isdigit()]
        if variant is not None and location[:1] == [variant]:
            location = location[1:]  # a discriminated union's errors start with the variant's tag
        field = next((part for part in location if specs and part in specs), location[-1] if location else "")
        label = specs[field].label if specs and field in specs else field.replace("_", " ")
        message = error["msg"].rstrip(".")
        if error["type"] == "value_error":  # pydantic prefixes a validator's own sentence with "Value error, "
            message = str(error.get("ctx", {}).get("error", message)).rstrip(".")
        if error["type"] == "missing":
            message = "is required; enter a value"
        sentences.append(f"{label}: {message}." if label else f"{message}.")
    return " ".join(sentences)
