"""
make_schemas.py — writes the JSON Schema corpus of tests/constrain/schemas/.

Two sources, named by prefix:
  pyd_*   pydantic v2 models written here, turned into the schema the openai
          SDK sends for `client.chat.completions.parse(response_format=Model)`:
          openai.lib._pydantic.to_strict_json_schema (additionalProperties
          false on every object, every property required, None defaults
          dropped, a $ref with siblings inlined). Real-world shapes: nested
          models, recursive models ($defs/$ref), Enum and Literal fields,
          Optional (anyOf with null), constrained strings (pattern, min/max
          length), formats (date-time, date, uuid, ...), number bounds, lists
          with min/max length, unions (anyOf).
  hand_*  schemas written by hand below for what pydantic does not emit:
          optional properties, additionalProperties absent or a schema,
          type lists, const, root $ref "#" recursion, nested $defs chains,
          exclusive bounds, top-level arrays and scalars.

Only what constrain.h supports is here: keywords it refuses by name
(prefixItems, allOf of several schemas, not, ...) are test_hostile.py rows.

Run from the repository root to regenerate (deterministic output):
    .venv/bin/python tests/constrain/make_schemas.py
"""
import datetime as dt
import enum
import json
import os
import uuid
from typing import Annotated, List, Literal, Optional, Union

from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")

Str50 = Annotated[str, Field(max_length=50)]
Slug = Annotated[str, Field(pattern=r"^[a-z0-9]+(-[a-z0-9]+)*$", max_length=40)]
Email = Annotated[str, Field(json_schema_extra={"format": "email"})]
Hostname = Annotated[str, Field(json_schema_extra={"format": "hostname"})]
IPv4 = Annotated[str, Field(json_schema_extra={"format": "ipv4"})]
IPv6 = Annotated[str, Field(json_schema_extra={"format": "ipv6"})]
Uri = Annotated[str, Field(json_schema_extra={"format": "uri"})]
Percent = Annotated[float, Field(ge=0, le=100)]
Port = Annotated[int, Field(ge=1, le=65535)]


class Color(str, enum.Enum):
    red = "red"
    green = "green"
    blue = "blue"


class Priority(int, enum.Enum):
    low = 1
    medium = 2
    high = 3


class Sentiment(str, enum.Enum):
    positive = "positive"
    negative = "negative"
    neutral = "neutral"
    mixed = "mixed"


# ---- pydantic models -------------------------------------------------------------

class CalendarEvent(BaseModel):
    name: str
    date: str
    participants: list[str]


class MathStep(BaseModel):
    explanation: str
    output: str


class MathReasoning(BaseModel):
    steps: list[MathStep]
    final_answer: str


class Address(BaseModel):
    street: Str50
    city: Str50
    postal_code: Annotated[str, Field(pattern=r"^[0-9]{5}(-[0-9]{4})?$")]
    country: Annotated[str, Field(pattern=r"^[A-Z]{2}$")]


class Person(BaseModel):
    first_name: str
    last_name: str
    age: Annotated[int, Field(ge=0, le=150)]
    email: Email
    address: Address


class LineItem(BaseModel):
    sku: Annotated[str, Field(pattern=r"^[A-Z]{3}-[0-9]{4}$")]
    description: str
    quantity: Annotated[int, Field(ge=1, le=1000)]
    unit_price: Annotated[float, Field(ge=0)]


class Invoice(BaseModel):
    invoice_id: uuid.UUID
    issued: dt.date
    due: dt.date
    customer: Person
    items: Annotated[List[LineItem], Field(min_length=1, max_length=5)]
    currency: Literal["USD", "EUR", "GBP", "JPY"]
    paid: bool


class TreeNode(BaseModel):
    value: int
    children: list["TreeNode"]


class Comment(BaseModel):
    author: str
    text: Annotated[str, Field(max_length=200)]
    replies: list["Comment"]


class LinkedList(BaseModel):
    value: str
    next: Optional["LinkedList"]


class Entity(BaseModel):
    text: str
    label: Literal["PERSON", "ORG", "LOC", "DATE", "MONEY"]
    start: Annotated[int, Field(ge=0)]
    end: Annotated[int, Field(ge=0)]


class EntityExtraction(BaseModel):
    entities: list[Entity]


class SentimentResult(BaseModel):
    sentiment: Sentiment
    confidence: Annotated[float, Field(ge=0, le=1)]
    aspects: list[str]


class Classification(BaseModel):
    category: Literal["billing", "technical", "account", "other"]
    priority: Priority
    needs_human: bool


class WeatherQuery(BaseModel):
    location: str
    unit: Literal["celsius", "fahrenheit"]
    days: Annotated[int, Field(ge=1, le=14)]


class FunctionCall(BaseModel):
    name: Literal["get_weather", "search_web", "send_email"]
    arguments: str


class ToolPlan(BaseModel):
    thought: str
    calls: Annotated[list[FunctionCall], Field(max_length=3)]


class Product(BaseModel):
    id: Annotated[int, Field(gt=0)]
    name: Str50
    price: Annotated[float, Field(gt=0, lt=100000)]
    tags: Annotated[list[Slug], Field(max_length=4)]
    color: Optional[Color]
    in_stock: bool


class Catalog(BaseModel):
    products: Annotated[list[Product], Field(min_length=1, max_length=3)]
    updated_at: dt.datetime


class Coordinates(BaseModel):
    lat: Annotated[float, Field(ge=-90, le=90)]
    lon: Annotated[float, Field(ge=-180, le=180)]


class Place(BaseModel):
    name: str
    coords: Coordinates
    kind: Literal["city", "park", "museum", "restaurant"]
    rating: Optional[Annotated[float, Field(ge=0, le=5)]]


class Itinerary(BaseModel):
    title: str
    days: Annotated[list[list[Place]], Field(min_length=1, max_length=3)]


class Cat(BaseModel):
    kind: Literal["cat"]
    indoor: bool
    lives_left: Annotated[int, Field(ge=0, le=9)]


class Dog(BaseModel):
    kind: Literal["dog"]
    breed: str
    good_boy: Literal[True]


class Pet(BaseModel):
    name: str
    animal: Union[Cat, Dog]


class Household(BaseModel):
    pets: list[Union[Cat, Dog]]
    address: Optional[Address]


class SQLQuery(BaseModel):
    table: Literal["users", "orders", "products"]
    columns: Annotated[list[Literal["id", "name", "email", "created_at", "total"]], Field(min_length=1)]
    where: Optional[str]
    limit: Optional[Annotated[int, Field(ge=1, le=1000)]]
    order: Literal["asc", "desc"]


class Condition(BaseModel):
    column: str
    operator: Literal["=", ">", "<", "<=", ">=", "!="]
    value: Union[str, int, float, bool]


class Filter(BaseModel):
    op: Literal["and", "or"]
    conditions: list[Condition]
    groups: list["Filter"]


class UIComponent(BaseModel):
    type: Literal["div", "button", "header", "section", "field", "form"]
    label: str
    children: list["UIComponent"]
    attributes: list["Attribute"]


class Attribute(BaseModel):
    name: str
    value: str


class Resume(BaseModel):
    class Job(BaseModel):
        company: str
        title: str
        start: dt.date
        end: Optional[dt.date]
        highlights: Annotated[list[str], Field(max_length=4)]

    name: str
    email: Email
    phone: Optional[Annotated[str, Field(pattern=r"^\+?[0-9]{7,15}$")]]
    skills: Annotated[list[str], Field(min_length=1, max_length=10)]
    jobs: list[Job]


class Meeting(BaseModel):
    title: str
    start: dt.datetime
    duration_minutes: Annotated[int, Field(ge=5, le=480)]
    attendees: Annotated[list[Email], Field(min_length=1)]
    location: Union[Uri, str]
    recurring: Optional[Literal["daily", "weekly", "monthly"]]


class Server(BaseModel):
    hostname: Hostname
    ipv4: IPv4
    ipv6: Optional[IPv6]
    ports: Annotated[list[Port], Field(max_length=5)]
    role: Literal["web", "db", "cache", "worker"]


class Cluster(BaseModel):
    name: Slug
    region: Literal["us-east-1", "us-west-2", "eu-west-1", "ap-south-1"]
    servers: Annotated[list[Server], Field(min_length=1, max_length=4)]


class Review(BaseModel):
    stars: Annotated[int, Field(ge=1, le=5)]
    title: Annotated[str, Field(min_length=3, max_length=60)]
    body: str
    pros: list[str]
    cons: list[str]
    would_recommend: bool


class Recipe(BaseModel):
    class Ingredient(BaseModel):
        name: str
        amount: Annotated[float, Field(gt=0)]
        unit: Literal["g", "kg", "ml", "l", "tsp", "tbsp", "cup", "piece"]

    title: str
    servings: Annotated[int, Field(ge=1, le=20)]
    ingredients: Annotated[list[Ingredient], Field(min_length=1)]
    steps: Annotated[list[str], Field(min_length=1)]
    vegetarian: bool


class Citation(BaseModel):
    source_id: Annotated[int, Field(ge=0)]
    quote: str


class AnswerWithCitations(BaseModel):
    answer: str
    citations: list[Citation]
    confidence: Literal["low", "medium", "high"]


class Translation(BaseModel):
    source_language: Annotated[str, Field(pattern=r"^[a-z]{2}$")]
    target_language: Annotated[str, Field(pattern=r"^[a-z]{2}$")]
    text: str


class MoneyAmount(BaseModel):
    amount: Annotated[int, Field(ge=-1000000000, le=1000000000)]
    currency: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]


class Transaction(BaseModel):
    id: uuid.UUID
    at: dt.datetime
    debit: MoneyAmount
    credit: MoneyAmount
    memo: Optional[Str50]


class Ledger(BaseModel):
    account: Annotated[str, Field(pattern=r"^[0-9]{4}-[0-9]{4}$")]
    transactions: Annotated[list[Transaction], Field(max_length=3)]


class Diagnosis(BaseModel):
    condition: str
    icd10: Annotated[str, Field(pattern=r"^[A-TV-Z][0-9][0-9AB](\.[0-9A-TV-Z]{1,4})?$")]
    severity: Literal["mild", "moderate", "severe"]
    temperature_c: Annotated[float, Field(ge=30, le=45)]


class FileNode(BaseModel):
    name: str
    is_dir: bool
    size: Annotated[int, Field(ge=0)]
    children: list["FileNode"]


class JsonPatchOp(BaseModel):
    op: Literal["add", "remove", "replace", "move", "copy", "test"]
    path: Annotated[str, Field(pattern=r"^(/[^/~]*(~[01][^/~]*)*)*$")]
    value: Optional[Union[str, float, bool]]


class JsonPatch(BaseModel):
    ops: list[JsonPatchOp]


class Survey(BaseModel):
    class Question(BaseModel):
        text: str
        kind: Literal["single", "multi", "text", "scale"]
        options: list[str]
        required: bool

    title: str
    questions: Annotated[list[Question], Field(min_length=1, max_length=5)]


class ChessMove(BaseModel):
    move: Annotated[str, Field(pattern=r"^([KQRBN]?[a-h]?[1-8]?x?[a-h][1-8](=[QRBN])?|O-O(-O)?)[+#]?$")]
    evaluation: Annotated[float, Field(ge=-100, le=100)]


class Colors(BaseModel):
    primary: Annotated[str, Field(pattern=r"^#[0-9a-fA-F]{6}$")]
    secondary: Annotated[str, Field(pattern=r"^#[0-9a-fA-F]{6}$")]
    palette: Annotated[list[Color], Field(min_length=2, max_length=3)]


class VersionInfo(BaseModel):
    package: Slug
    version: Annotated[str, Field(pattern=r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")]
    yanked: bool
    released: dt.date


class KV(BaseModel):
    key: str
    value: Union[str, int, bool, None]


class Config(BaseModel):
    entries: list[KV]
    version: Literal[1, 2]


class Todo(BaseModel):
    id: Annotated[int, Field(ge=1)]
    title: str
    done: bool
    priority: Priority
    due: Optional[dt.date]
    children: list["Todo"]


class TodoList(BaseModel):
    owner: str
    todos: list[Todo]


class Timestamped(BaseModel):
    created: dt.datetime
    updated: dt.datetime


class Document(BaseModel):
    id: uuid.UUID
    meta: Timestamped
    title: str
    sections: list["Section"]


class Section(BaseModel):
    heading: str
    paragraphs: list[str]
    subsections: list["Section"]


class Scores(BaseModel):
    accuracy: Percent
    precision: Percent
    recall: Percent
    f1: Percent


class Experiment(BaseModel):
    name: str
    seed: Annotated[int, Field(ge=0, le=4294967295)]
    learning_rate: Annotated[float, Field(gt=0, le=1)]
    epochs: Annotated[int, Field(ge=1, le=1000)]
    scores: Scores


class Flight(BaseModel):
    flight_number: Annotated[str, Field(pattern=r"^[A-Z]{2}[0-9]{1,4}$")]
    origin: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
    destination: Annotated[str, Field(pattern=r"^[A-Z]{3}$")]
    departure: dt.datetime
    seats: Annotated[list[Annotated[str, Field(pattern=r"^[0-9]{1,2}[A-F]$")]], Field(min_length=1, max_length=4)]


class Booking(BaseModel):
    reference: Annotated[str, Field(pattern=r"^[A-Z0-9]{6}$")]
    flights: Annotated[list[Flight], Field(min_length=1, max_length=2)]
    passenger: Person


class Step(BaseModel):
    action: Literal["click", "type", "scroll", "wait", "navigate"]
    selector: Optional[str]
    text: Optional[str]
    url: Optional[Uri]


class BrowserPlan(BaseModel):
    goal: str
    steps: Annotated[list[Step], Field(max_length=6)]


class Moderation(BaseModel):
    flagged: bool
    categories: list[Literal["hate", "harassment", "self-harm", "sexual", "violence"]]
    scores: Annotated[list[Annotated[float, Field(ge=0, le=1)]], Field(min_length=5, max_length=5)]


class Quiz(BaseModel):
    class Item(BaseModel):
        question: str
        choices: Annotated[list[str], Field(min_length=2, max_length=4)]
        answer_index: Annotated[int, Field(ge=0, le=3)]

    topic: str
    items: Annotated[list[Item], Field(min_length=1, max_length=3)]


class Matrix(BaseModel):
    rows: Annotated[list[Annotated[list[int], Field(min_length=2, max_length=2)]], Field(min_length=2, max_length=2)]


class Expr(BaseModel):
    op: Literal["+", "-", "*", "/", "num"]
    value: Optional[float]
    args: list["Expr"]


class Graph(BaseModel):
    class Edge(BaseModel):
        src: Annotated[int, Field(ge=0)]
        dst: Annotated[int, Field(ge=0)]
        weight: float

    nodes: Annotated[list[str], Field(min_length=1, max_length=6)]
    edges: list[Edge]
    directed: bool


class Contact(BaseModel):
    name: str
    phones: list[Annotated[str, Field(pattern=r"^\+[1-9][0-9]{6,14}$")]]
    emails: list[Email]
    birthday: Optional[dt.date]


class AddressBook(BaseModel):
    contacts: list[Contact]


class LogEntry(BaseModel):
    ts: dt.datetime
    level: Literal["DEBUG", "INFO", "WARN", "ERROR"]
    service: Slug
    message: str
    trace_id: Optional[Annotated[str, Field(pattern=r"^[0-9a-f]{32}$")]]


class Alert(BaseModel):
    rule: str
    entries: Annotated[list[LogEntry], Field(min_length=1, max_length=3)]
    severity: Annotated[int, Field(ge=1, le=5)]


class Employee(BaseModel):
    name: str
    title: str
    reports: list["Employee"]


class OrgChart(BaseModel):
    company: str
    ceo: Employee


class Sudoku(BaseModel):
    grid: Annotated[list[Annotated[list[Annotated[int, Field(ge=0, le=9)]], Field(min_length=4, max_length=4)]],
                    Field(min_length=4, max_length=4)]


class Temperature(BaseModel):
    value: Annotated[float, Field(gt=-273.15)]
    scale: Literal["C", "F", "K"]


class RGB(BaseModel):
    r: Annotated[int, Field(ge=0, le=255)]
    g: Annotated[int, Field(ge=0, le=255)]
    b: Annotated[int, Field(ge=0, le=255)]


class Pixelart(BaseModel):
    width: Annotated[int, Field(ge=1, le=4)]
    height: Annotated[int, Field(ge=1, le=4)]
    pixels: Annotated[list[RGB], Field(max_length=4)]


class Receipt(BaseModel):
    merchant: str
    total_cents: Annotated[int, Field(ge=0)]
    tax_cents: Annotated[int, Field(ge=0)]
    purchased_at: dt.datetime
    payment: Literal["cash", "card", "mobile"]
    card_last4: Optional[Annotated[str, Field(pattern=r"^[0-9]{4}$")]]


class Interval(BaseModel):
    start: dt.time
    end: dt.time


class OpeningHours(BaseModel):
    monday: list[Interval]
    tuesday: list[Interval]
    sunday: Optional[list[Interval]]


class Duration(BaseModel):
    iso: dt.timedelta
    human: str


class Empty(BaseModel):
    pass


class OnlyBool(BaseModel):
    ok: bool


class Nullable(BaseModel):
    a: Optional[int]
    b: Optional[str]
    c: Optional[bool]
    d: Optional[float]


class Wide(BaseModel):
    f01: int
    f02: str
    f03: bool
    f04: float
    f05: Optional[int]
    f06: list[int]
    f07: Color
    f08: Literal["x"]
    f09: Annotated[str, Field(max_length=5)]
    f10: Annotated[int, Field(ge=10, le=20)]
    f11: int
    f12: str
    f13: bool
    f14: float
    f15: list[str]
    f16: Optional[Color]


class StringList(BaseModel):
    items: Annotated[list[Annotated[str, Field(min_length=1, max_length=8)]], Field(min_length=3, max_length=3)]


class ReActStep(BaseModel):
    thought: str
    action: Literal["search", "lookup", "finish"]
    action_input: str


class Agent(BaseModel):
    steps: Annotated[list[ReActStep], Field(max_length=4)]
    final: Optional[str]


PYDANTIC = {
    "calendar_event": CalendarEvent, "math_reasoning": MathReasoning, "person": Person, "invoice": Invoice,
    "tree_node": TreeNode, "comment_thread": Comment, "linked_list": LinkedList,
    "entity_extraction": EntityExtraction, "sentiment": SentimentResult, "classification": Classification,
    "weather_query": WeatherQuery, "tool_plan": ToolPlan, "catalog": Catalog, "itinerary": Itinerary,
    "pet": Pet, "household": Household, "sql_query": SQLQuery, "filter": Filter, "ui_component": UIComponent,
    "resume": Resume, "meeting": Meeting, "cluster": Cluster, "review": Review, "recipe": Recipe,
    "answer_citations": AnswerWithCitations, "translation": Translation, "ledger": Ledger,
    "diagnosis": Diagnosis, "file_tree": FileNode, "json_patch": JsonPatch, "survey": Survey,
    "chess_move": ChessMove, "colors": Colors, "version_info": VersionInfo, "config": Config,
    "todo_list": TodoList, "document": Document, "experiment": Experiment, "booking": Booking,
    "browser_plan": BrowserPlan, "moderation": Moderation, "quiz": Quiz, "matrix": Matrix, "expr": Expr,
    "graph": Graph, "address_book": AddressBook, "alert": Alert, "org_chart": OrgChart, "sudoku": Sudoku,
    "temperature": Temperature, "pixelart": Pixelart, "receipt": Receipt, "opening_hours": OpeningHours,
    "duration": Duration, "empty": Empty, "only_bool": OnlyBool, "nullable": Nullable, "wide": Wide,
    "string_list": StringList, "agent": Agent, "server": Server, "product": Product, "flight": Flight,
    "contact": Contact, "todo": Todo, "section": Section, "rgb": RGB, "entity": Entity, "place": Place,
}

# ---- hand-written -------------------------------------------------------------------

HAND = {
    "optional_props": {
        "type": "object",
        "properties": {"id": {"type": "integer"}, "nick": {"type": "string"}, "admin": {"type": "boolean"}},
        "required": ["id"], "additionalProperties": False},
    "all_optional": {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "number"}},
        "additionalProperties": False},
    "type_list": {
        "type": "object",
        "properties": {"v": {"type": ["string", "integer", "null"]}, "w": {"type": ["number", "boolean"]}},
        "required": ["v", "w"], "additionalProperties": False},
    "const_fields": {
        "type": "object",
        "properties": {"version": {"const": "2.0"}, "kind": {"const": 7}, "flag": {"const": True},
                       "nothing": {"const": None}},
        "required": ["version", "kind", "flag", "nothing"], "additionalProperties": False},
    "root_ref_tree": {
        "type": "object",
        "properties": {"label": {"type": "string", "maxLength": 10},
                       "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 3}},
        "required": ["label", "kids"], "additionalProperties": False},
    "defs_chain": {
        "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/c"},
                  "c": {"type": "object", "properties": {"z": {"type": "integer"}}, "required": ["z"],
                        "additionalProperties": False}},
        "$ref": "#/$defs/a"},
    "definitions_legacy": {
        "definitions": {"point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
                                  "required": ["x", "y"], "additionalProperties": False}},
        "type": "object",
        "properties": {"from": {"$ref": "#/definitions/point"}, "to": {"$ref": "#/definitions/point"}},
        "required": ["from", "to"], "additionalProperties": False},
    "mutual_recursion": {
        "$defs": {"even": {"type": "object", "properties": {"odd": {"anyOf": [{"$ref": "#/$defs/odd"}, {"type": "null"}]}},
                           "required": ["odd"], "additionalProperties": False},
                  "odd": {"type": "object", "properties": {"even": {"anyOf": [{"$ref": "#/$defs/even"}, {"type": "null"}]}},
                          "required": ["even"], "additionalProperties": False}},
        "$ref": "#/$defs/even"},
    "exclusive_bounds": {
        "type": "object",
        "properties": {"p": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
                       "q": {"type": "integer", "exclusiveMinimum": -5, "exclusiveMaximum": 5},
                       "r": {"type": "number", "minimum": -2.5, "maximum": 7.25}},
        "required": ["p", "q", "r"], "additionalProperties": False},
    "big_int_bounds": {
        "type": "object",
        "properties": {"i": {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
                       "u": {"type": "integer", "minimum": 1000, "maximum": 1000000},
                       "n": {"type": "integer", "maximum": -100}},
        "required": ["i", "u", "n"], "additionalProperties": False},
    "top_array": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 99}, "minItems": 1, "maxItems": 6},
    "top_string_enum": {"enum": ["yes", "no", "maybe"]},
    "top_integer": {"type": "integer"},
    "top_number": {"type": "number"},
    "top_boolean": {"type": "boolean"},
    "top_null": {"type": "null"},
    "top_string_pattern": {"type": "string", "pattern": "^[A-Z][a-z]+( [A-Z][a-z]+)*$"},
    "mixed_enum": {
        "type": "object",
        "properties": {"e": {"enum": ["a", 1, True, None, 2.5, "b\"q"]}},
        "required": ["e"], "additionalProperties": False},
    "string_lengths": {
        "type": "object",
        "properties": {"s0": {"type": "string", "maxLength": 0}, "s3": {"type": "string", "minLength": 3, "maxLength": 3},
                       "s1": {"type": "string", "minLength": 1}},
        "required": ["s0", "s3", "s1"], "additionalProperties": False},
    "array_exact": {
        "type": "object",
        "properties": {"pair": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2},
                       "none": {"type": "array", "items": {"type": "string"}, "maxItems": 0}},
        "required": ["pair", "none"], "additionalProperties": False},
    "anyof_objects": {
        "anyOf": [
            {"type": "object", "properties": {"circle": {"type": "number", "minimum": 0}}, "required": ["circle"],
             "additionalProperties": False},
            {"type": "object", "properties": {"w": {"type": "number"}, "h": {"type": "number"}}, "required": ["w", "h"],
             "additionalProperties": False}]},
    "anyof_scalars": {"anyOf": [{"type": "string", "format": "date"}, {"type": "integer", "minimum": 1900}, {"type": "null"}]},
    "nested_arrays": {
        "type": "array", "maxItems": 3,
        "items": {"type": "array", "maxItems": 3, "items": {"type": "array", "maxItems": 2, "items": {"type": "integer"}}}},
    "additional_schema": {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "required": ["name"],
        "additionalProperties": {"type": "integer"}},
    "dict_of_strings": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 20}},
    "open_object": {
        "type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]},
    "any_value": {},
    "formats_all": {
        "type": "object",
        "properties": {"dt": {"type": "string", "format": "date-time"}, "d": {"type": "string", "format": "date"},
                       "t": {"type": "string", "format": "time"}, "dur": {"type": "string", "format": "duration"},
                       "email": {"type": "string", "format": "email"}, "host": {"type": "string", "format": "hostname"},
                       "v4": {"type": "string", "format": "ipv4"}, "v6": {"type": "string", "format": "ipv6"},
                       "id": {"type": "string", "format": "uuid"}, "link": {"type": "string", "format": "uri"}},
        "required": ["dt", "d", "t", "dur", "email", "host", "v4", "v6", "id", "link"], "additionalProperties": False},
    "unicode_keys": {
        "type": "object",
        "properties": {"名前": {"type": "string"}, "größe": {"type": "integer"}, "emoji_🙂": {"type": "boolean"},
                       "quote\"key": {"type": "null"}, "back\\slash": {"type": "integer"}},
        "required": ["名前", "größe", "emoji_🙂", "quote\"key", "back\\slash"], "additionalProperties": False},
    "unicode_enum": {"enum": ["café", "naïve", "日本", "🙂", "tab\there", "new\nline"]},
    "pattern_unicode": {"type": "string", "pattern": "^[α-ω]{2,4}$"},
    "pattern_alternation": {"type": "string", "pattern": "^(GET|POST|PUT|DELETE) /[a-z/]{0,20}$"},
    "pattern_escapes": {"type": "string", "pattern": "^\\d{3}-\\d{2}-\\d{4}$"},
    "geojson_point": {
        "type": "object",
        "properties": {"type": {"const": "Feature"},
                       "geometry": {"type": "object",
                                    "properties": {"type": {"const": "Point"},
                                                   "coordinates": {"type": "array", "items": {"type": "number"},
                                                                   "minItems": 2, "maxItems": 3}},
                                    "required": ["type", "coordinates"], "additionalProperties": False},
                       "properties": {"type": "object", "additionalProperties": {"type": ["string", "number"]}}},
        "required": ["type", "geometry", "properties"], "additionalProperties": False},
    "json_rpc": {
        "type": "object",
        "properties": {"jsonrpc": {"const": "2.0"}, "method": {"type": "string", "pattern": "^[a-z_.]+$"},
                       "params": {"type": "array", "items": {}, "maxItems": 4},
                       "id": {"type": ["integer", "string"]}},
        "required": ["jsonrpc", "method", "params", "id"], "additionalProperties": False},
    "openapi_param": {
        "$defs": {"schema": {"type": "object",
                             "properties": {"type": {"enum": ["string", "integer", "boolean", "array"]},
                                            "items": {"$ref": "#/$defs/schema"}},
                             "required": ["type"], "additionalProperties": False}},
        "type": "object",
        "properties": {"name": {"type": "string"}, "in": {"enum": ["query", "header", "path", "cookie"]},
                       "required": {"type": "boolean"}, "schema": {"$ref": "#/$defs/schema"}},
        "required": ["name", "in", "schema"], "additionalProperties": False},
    "package_json": {
        "type": "object",
        "properties": {"name": {"type": "string", "pattern": "^(@[a-z0-9-]+/)?[a-z0-9-]+$"},
                       "version": {"type": "string", "pattern": "^[0-9]+\\.[0-9]+\\.[0-9]+$"},
                       "private": {"type": "boolean"},
                       "dependencies": {"type": "object", "additionalProperties": {"type": "string"}}},
        "required": ["name", "version"], "additionalProperties": False},
    "number_no_bounds_array": {"type": "array", "items": {"type": "number"}, "maxItems": 5},
    "bool_or_obj": {"anyOf": [{"type": "boolean"}, {"$ref": "#/$defs/o"}],
                    "$defs": {"o": {"type": "object", "properties": {"k": {"type": "string"}}, "required": ["k"],
                                    "additionalProperties": False}}},
}


def main():
    os.makedirs(OUT, exist_ok=True)
    for fn in os.listdir(OUT):
        if fn.endswith(".json"):
            os.unlink(os.path.join(OUT, fn))
    n = 0
    for name, model in sorted(PYDANTIC.items()):
        with open(os.path.join(OUT, f"pyd_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(to_strict_json_schema(model), f, indent=1, ensure_ascii=False, sort_keys=False)
            f.write("\n")
        n += 1
    for name, schema in sorted(HAND.items()):
        with open(os.path.join(OUT, f"hand_{name}.json"), "w", encoding="utf-8") as f:
            json.dump(schema, f, indent=1, ensure_ascii=False)
            f.write("\n")
        n += 1
    print(f"{n} schemas in {OUT}")


if __name__ == "__main__":
    main()
