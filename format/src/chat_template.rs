//! Chat-template rendering, byte-exact with Hugging Face transformers.
//!
//! A model's chat template (a Jinja2 program shipped in `tokenizer_config.json` or `chat_template.jinja`)
//! turns a list of chat messages into the prompt text the model was trained on. What the model sees
//! is what transformers' `apply_chat_template(tokenize=False)` produces, so this module reproduces
//! that function (its `render_jinja_template` core plus the input normalisation in front of it) with
//! [minijinja] instead of Python's Jinja2.
//!
//! minijinja is configured like transformers' `ImmutableSandboxedEnvironment` (`trim_blocks`,
//! `lstrip_blocks`, no autoescape, lenient undefined, `loopcontrols`) and gets the globals and filters
//! transformers adds (`raise_exception`, `strftime_now`, its own `tojson`). Where the two engines still
//! disagree, the fix is either a rewrite of the template source before compiling (see
//! [`preprocess`]) or a filter, test or method that behaves like its Python counterpart; each one
//! says below which difference it removes. Compilation happens once per template; rendering takes
//! `&self` and can run on many threads at once.
//!
//! Input: messages, tools and variables arrive as `serde_json` values and are converted per render
//! (cheap next to rendering). Build them with `serde_json`'s `preserve_order` feature: without it JSON
//! objects come in key-sorted, and `tojson` of a tool schema or `message.items()` would differ from
//! transformers, which keeps the request's order.
//!
//! Known residual differences, none exercised by the 46 published templates of the test fixtures
//! except where noted:
//! * Jinja2's `Markup + str` HTML-escapes the `str` (Python operator overloading, even with
//!   autoescape off); minijinja concatenates plainly. Only `"..."|safe + x` shows it: functionary
//!   v3.1 with a tool description containing `<>&'"` renders escaped text in transformers.
//! * Floats concatenated with `~`, passed through `|string` or printed inside a list/dict use
//!   minijinja's notation (`1e20` as `100000000000000000000.0`, `[1e20]`); a bare `{{ x }}` is fixed.
//! * A dict key named like a dict method (`schema.items`) resolves to the key; Python returns the
//!   bound method. Python `%`-formatting of strings is not available.
//! * Some values Python's `json.dumps` refuses are serialised by `tojson` (`namespace()`, `range()`,
//!   `d.items()`, `x|reverse`), and `generator|last` works where Python raises. Both only turn a
//!   failing render into a rendered one.

mod preprocess;

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

use chrono::format::{Item, StrftimeItems};
use chrono::NaiveDateTime;
use minijinja::value::{
    from_args, Enumerator, Kwargs, Object, ObjectRepr, Rest, Value, ValueKind, ValueOrKwargs,
};
use minijinja::{AutoEscape, Environment, Error, ErrorKind, State, UndefinedBehavior};
use sha2::{Digest, Sha256};

/// Name under which the one template lives in its environment (shows up in error locations).
const TEMPLATE_NAME: &str = "chat_template";

/// Context key of the render's [`Clock`]. Not a valid identifier, so no template can read or shadow it.
const CLOCK_KEY: &str = " clock";

/// A compiled chat template. Cheap to share (`Arc<ChatTemplate>`); `render` takes `&self`.
pub struct ChatTemplate {
    env: Environment<'static>,
    sha256: String,
}

/// Special-token strings from a `tokenizer_config.json`. transformers passes every one that is set
/// to the template as a variable of the same name (`bos_token`, `eos_token`, ...).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    pub unk_token: Option<String>,
    pub sep_token: Option<String>,
    pub pad_token: Option<String>,
    pub cls_token: Option<String>,
    pub mask_token: Option<String>,
}

/// The time `strftime_now` sees. transformers calls Python's `datetime.now()`, i.e. naive local time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The system clock in UTC, read when the template calls `strftime_now`.
    #[default]
    SystemUtc,
    /// A fixed wall-clock time (reproducible renders, tests, or local time computed by the caller).
    Fixed(NaiveDateTime),
}

impl Clock {
    /// A fixed time, `seconds` after the Unix epoch (UTC): a phase renders
    /// with the time it started, so that a resumed run renders the same bytes.
    pub fn at_unix(seconds: i64) -> Clock {
        chrono::DateTime::from_timestamp(seconds, 0)
            .map(|t| Clock::Fixed(t.naive_utc()))
            .unwrap_or_default()
    }
}

/// Everything one render needs.
#[derive(Debug, Clone, Copy)]
pub struct RenderInput<'a> {
    /// The conversation: a JSON array of message objects.
    pub messages: &'a serde_json::Value,
    /// Tool schemas (a JSON array), or `None`; templates see `none` then, as in transformers.
    pub tools: Option<&'a serde_json::Value>,
    /// RAG documents, or `None`.
    pub documents: Option<&'a serde_json::Value>,
    pub add_generation_prompt: bool,
    /// Extra template variables: special tokens (see [`SpecialTokens::insert_into`]) and request
    /// options such as `enable_thinking` or `reasoning_effort`.
    pub variables: &'a serde_json::Map<String, serde_json::Value>,
    pub now: Clock,
}

/// A template that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("chat template does not compile: {0}")]
    Syntax(String),
    #[error("tokenizer config has no chat_template")]
    Missing,
    #[error("tokenizer config has no chat template named {name:?} (it has: {available})")]
    NotFound { name: String, available: String },
    #[error("tokenizer config chat_template is malformed: {0}")]
    Malformed(&'static str),
}

/// A render that failed.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The template rejected the input with `raise_exception(message)`; the message is the
    /// template author's own words (e.g. "Conversation roles must alternate user/assistant/...").
    #[error("{0}")]
    Raised(String),
    /// The input does not have the shape transformers accepts (e.g. a message that is not an object).
    #[error("invalid chat input: {0}")]
    InvalidInput(String),
    /// The template failed on its own: an invalid operation, an undefined value, a type error.
    #[error("chat template failed: {0}")]
    Template(Error),
}

/// Marks the error that `raise_exception` raises, so that [`RenderError::Raised`] can be told apart.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct RaisedException(String);

impl ChatTemplate {
    /// Compiles a template source (a `.jinja` file's text exactly as stored; CRLF is handled inside).
    pub fn from_source(source: &str) -> Result<ChatTemplate, TemplateError> {
        let rewritten = preprocess::preprocess(source).map_err(TemplateError::Syntax)?;
        let mut env = new_environment();
        env.add_template_owned(TEMPLATE_NAME, rewritten)
            .map_err(|e| TemplateError::Syntax(e.to_string()))?;
        let digest = Sha256::digest(source.as_bytes());
        let mut sha256 = String::with_capacity(64);
        for byte in digest {
            let _ = write!(sha256, "{byte:02x}");
        }
        Ok(ChatTemplate { env, sha256 })
    }

    /// Compiles the chat template of a `tokenizer_config.json` value. `chat_template` is either the
    /// source itself or a list of `{name, template}`; from a list, `name` picks one (`"default"` when
    /// `None`). Note that transformers picks `"tool_use"` instead of `"default"` when tools are passed
    /// and no name is given; pass `Some("tool_use")` for that (and fall back on `NotFound`).
    pub fn from_tokenizer_config(
        config: &serde_json::Value,
        name: Option<&str>,
    ) -> Result<(ChatTemplate, SpecialTokens), TemplateError> {
        let wanted = name.unwrap_or("default");
        let source = match config.get("chat_template") {
            None | Some(serde_json::Value::Null) => return Err(TemplateError::Missing),
            Some(serde_json::Value::String(source)) if wanted == "default" => source.as_str(),
            Some(serde_json::Value::String(_)) => {
                return Err(TemplateError::NotFound {
                    name: wanted.to_owned(),
                    available: "default".to_owned(),
                })
            }
            Some(serde_json::Value::Array(entries)) => {
                let mut named = Vec::with_capacity(entries.len());
                for entry in entries {
                    let name = entry.get("name").and_then(|v| v.as_str());
                    let template = entry.get("template").and_then(|v| v.as_str());
                    match (name, template) {
                        (Some(name), Some(template)) => named.push((name, template)),
                        _ => return Err(TemplateError::Malformed("entry without name/template")),
                    }
                }
                // transformers builds a dict from the list, so a later duplicate name wins.
                match named.iter().rev().find(|(n, _)| *n == wanted) {
                    Some(&(_, template)) => template,
                    None => {
                        let names: Vec<&str> = named.iter().map(|(n, _)| *n).collect();
                        return Err(TemplateError::NotFound {
                            name: wanted.to_owned(),
                            available: names.join(", "),
                        });
                    }
                }
            }
            Some(_) => return Err(TemplateError::Malformed("neither a string nor a list")),
        };
        let token = |key: &str| -> Option<String> {
            match config.get(key)? {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Object(o) => Some(o.get("content")?.as_str()?.to_owned()),
                _ => None,
            }
        };
        let tokens = SpecialTokens {
            bos_token: token("bos_token"),
            eos_token: token("eos_token"),
            unk_token: token("unk_token"),
            sep_token: token("sep_token"),
            pad_token: token("pad_token"),
            cls_token: token("cls_token"),
            mask_token: token("mask_token"),
        };
        Ok((ChatTemplate::from_source(source)?, tokens))
    }

    /// SHA-256 (lower-case hex) of the template source as given to [`ChatTemplate::from_source`].
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Renders one conversation. The template sees `messages`, `tools`, `documents`,
    /// `add_generation_prompt` and every entry of `variables`, like transformers' template.
    pub fn render(&self, input: &RenderInput<'_>) -> Result<String, RenderError> {
        let ctx = build_context(input)?;
        self.render_context(ctx)
    }

    /// [`ChatTemplate::render`] for plain `{role, content}` messages, built for the template
    /// directly rather than through JSON: the same text, with less work per conversation.
    pub fn render_plain(
        &self,
        messages: &[(&str, &str)],
        add_generation_prompt: bool,
        variables: &serde_json::Map<String, serde_json::Value>,
        now: Clock,
    ) -> Result<String, RenderError> {
        let messages = messages
            .iter()
            .map(|(role, content)| {
                Value::from_pairs(vec![
                    (Value::from("role"), Value::from(*role)),
                    (Value::from("content"), Value::from(*content)),
                ])
            })
            .collect();
        let ctx = context(messages, None, None, add_generation_prompt, variables, now)?;
        self.render_context(ctx)
    }

    fn render_context(&self, ctx: Value) -> Result<String, RenderError> {
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(RenderError::Template)?;
        template.render(ctx).map_err(|err| {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&err);
            while let Some(e) = source {
                if let Some(raised) = e.downcast_ref::<RaisedException>() {
                    return RenderError::Raised(raised.0.clone());
                }
                source = e.source();
            }
            RenderError::Template(err)
        })
    }
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl SpecialTokens {
    /// Adds the tokens that are set to `variables`, keeping entries already there: transformers
    /// renders with `{**special_tokens_map, **kwargs}`, so request options override special tokens.
    pub fn insert_into(&self, variables: &mut serde_json::Map<String, serde_json::Value>) {
        let all = [
            ("bos_token", &self.bos_token),
            ("eos_token", &self.eos_token),
            ("unk_token", &self.unk_token),
            ("sep_token", &self.sep_token),
            ("pad_token", &self.pad_token),
            ("cls_token", &self.cls_token),
            ("mask_token", &self.mask_token),
        ];
        for (key, value) in all {
            if let Some(value) = value {
                variables
                    .entry(key)
                    .or_insert_with(|| serde_json::Value::String(value.clone()));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Environment

fn new_environment() -> Environment<'static> {
    let mut env = Environment::new();
    // transformers: `ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)`; Jinja2's
    // default `keep_trailing_newline=False` drops one trailing newline of the source, as here.
    let syntax = minijinja::syntax::SyntaxConfig::builder()
        .trim_blocks(true)
        .lstrip_blocks(true)
        .keep_trailing_newline(false)
        .build()
        .expect("default delimiters are valid");
    env.set_syntax(syntax);
    // Jinja2's default `Undefined`: prints empty, is falsy, iterates empty, but attribute access on it
    // raises. `Chainable` would hide errors transformers reports; `Strict` breaks `loop.previtem`.
    env.set_undefined_behavior(UndefinedBehavior::Lenient);
    // Jinja2 autoescape is off by default; a prompt must contain `<`, `&`, quotes as written.
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_formatter(format_output);
    env.set_unknown_method_callback(python_method);

    env.add_function("raise_exception", raise_exception);
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env.add_filter(preprocess::ITER_FILTER, hf_iter);
    env.add_filter("int", int_filter);
    env.add_filter("float", float_filter);
    env.add_filter("trim", trim_filter);
    env.add_filter("indent", indent_filter);
    env.add_filter("map", lazy_map);
    env.add_filter("select", lazy_select);
    env.add_filter("selectattr", lazy_selectattr);
    env.add_filter("reject", lazy_reject);
    env.add_filter("rejectattr", lazy_rejectattr);
    env.add_test("iterable", is_iterable);
    env.add_test("sequence", is_sequence);
    env
}

/// `raise_exception(message)`: transformers raises `jinja2.TemplateError(message)`.
fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message.clone())
        .with_source(RaisedException(message)))
}

/// The render's clock, stored in the context under [`CLOCK_KEY`].
#[derive(Debug)]
struct ClockValue(Clock);

impl Object for ClockValue {}

/// `strftime_now(format)`: transformers' `datetime.now().strftime(format)`, with the clock injected.
fn strftime_now(state: &State, format: &str) -> Result<String, Error> {
    let clock = state
        .lookup(CLOCK_KEY)
        .and_then(|v| v.downcast_object_ref::<ClockValue>().map(|c| c.0))
        .unwrap_or_default();
    let now = match clock {
        Clock::Fixed(t) => t,
        Clock::SystemUtc => {
            let since_epoch = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default();
            chrono::DateTime::from_timestamp(
                since_epoch.as_secs() as i64,
                since_epoch.subsec_nanos(),
            )
            .unwrap_or_default()
            .naive_utc()
        }
    };
    python_strftime(&now, format)
}

/// Python's `datetime.strftime` on a naive datetime via chrono. Python itself handles `%f` (6-digit
/// microseconds; chrono's `%f` is nanoseconds) and `%z`/`%Z` (empty for a naive datetime; chrono
/// cannot format an offset it does not have); everything else goes to the C library, whose C-locale
/// output chrono reproduces.
fn python_strftime(now: &NaiveDateTime, format: &str) -> Result<String, Error> {
    let mut translated = String::with_capacity(format.len() + 4);
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            translated.push(c);
            continue;
        }
        match chars.next() {
            Some('f') => translated.push_str("%6f"),
            Some('z' | 'Z') => {}
            Some(d) => {
                translated.push('%');
                translated.push(d);
            }
            None => translated.push('%'),
        }
    }
    let items: Vec<Item<'_>> = StrftimeItems::new(&translated).collect();
    if items.contains(&Item::Error) {
        return Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("strftime_now: unsupported format {format:?}"),
        ));
    }
    let mut out = String::new();
    write!(out, "{}", now.format_with_items(items.iter()))
        .map_err(|_| Error::new(ErrorKind::InvalidOperation, "strftime_now: format failed"))?;
    Ok(out)
}

/// Output formatter: Python prints a float with `repr` (`1e+20`, `1.5e-07`, `nan`), minijinja as a
/// plain decimal. Everything else is printed as minijinja does (`None`, `True`, `[1, 'a']` like Python).
fn format_output(
    out: &mut minijinja::Output,
    state: &mut State,
    value: &Value,
) -> Result<(), Error> {
    if value.kind() == ValueKind::Number && !value.is_integer() {
        if let Ok(f) = f64::try_from(value.clone()) {
            let text = if f.is_nan() {
                "nan".to_owned()
            } else if f.is_infinite() {
                if f > 0.0 { "inf" } else { "-inf" }.to_owned()
            } else {
                python_float_repr(f)
            };
            return out.write_str(&text).map_err(Error::from);
        }
    }
    minijinja::escape_formatter(out, state, value)
}

/// Python's `repr(float)` for a finite float: the shortest digits that round-trip (Rust's `{:e}` gives
/// the same digits), in positional notation when the decimal exponent is in -4..16, else scientific
/// with a signed exponent of at least two digits.
fn python_float_repr(f: f64) -> String {
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let sign = if f.is_sign_negative() { "-" } else { "" };
    let point = exp + 1; // digits d1 d2 ... mean 0.d1d2... * 10^point
    if !(-4 < point && point <= 16) {
        let (first, rest) = digits.split_at(1);
        let frac = if rest.is_empty() {
            String::new()
        } else {
            format!(".{rest}")
        };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{first}{frac}e{esign}{:02}", exp.abs());
    }
    let len = digits.len() as i32;
    if point <= 0 {
        format!("{sign}0.{}{digits}", "0".repeat((-point) as usize))
    } else if point >= len {
        format!("{sign}{digits}{}.0", "0".repeat((point - len) as usize))
    } else {
        let (int, frac) = digits.split_at(point as usize);
        format!("{sign}{int}.{frac}")
    }
}

// ---------------------------------------------------------------------------------------------
// tojson

/// A filter's arguments as Python passes them: positional, or by keyword
/// (a keyword wins), at most `at_most` of them.
struct PythonArgs<'a> {
    positional: &'a [Value],
    kwargs: Kwargs,
}

impl<'a> PythonArgs<'a> {
    fn parse(args: &'a [Value], filter: &str, at_most: usize) -> Result<Self, Error> {
        let (positional, kwargs): (&[Value], Kwargs) = from_args(args)?;
        if positional.len() > at_most {
            return Err(Error::new(
                ErrorKind::TooManyArguments,
                format!("{filter} takes at most {at_most} arguments"),
            ));
        }
        Ok(PythonArgs { positional, kwargs })
    }

    /// The argument at `index`, or named `name`.
    fn get(&self, index: usize, name: &str) -> Result<Option<Value>, Error> {
        let keyword: Option<Value> = self.kwargs.get(name)?;
        Ok(keyword.or_else(|| self.positional.get(index).cloned()))
    }

    /// An error for a keyword the filter does not take.
    fn all_used(&self) -> Result<(), Error> {
        self.kwargs.assert_all_used()
    }
}

/// transformers' `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, i.e.
/// Python's `json.dumps` with those arguments. Note the positional order: the first positional
/// argument is `ensure_ascii`, not `indent` as in Jinja2's own filter. Jinja2's built-in (and
/// minijinja's) escape `<>&'` for HTML, which would change prompts.
fn tojson(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let args = args.into_values();
    let args = PythonArgs::parse(&args, "tojson", 4)?;
    let arg = |index: usize, name: &str| args.get(index, name);
    let ensure_ascii = arg(0, "ensure_ascii")?.is_some_and(|v| v.is_true());
    let indent = match arg(1, "indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) if v.kind() == ValueKind::String => Some(v.as_str().unwrap_or("").to_owned()),
        Some(v) if v.kind() == ValueKind::Bool => Some(if v.is_true() { " " } else { "" }.into()),
        Some(v) => match v.as_i64() {
            Some(n) => Some(" ".repeat(n.max(0) as usize)),
            None => return Err(type_error("indent must be an int, a string or None")),
        },
    };
    let separators = match arg(2, "separators")? {
        Some(v) if !v.is_none() => {
            let parts: Vec<Value> = v.try_iter()?.collect();
            match parts.as_slice() {
                [item, key] if item.as_str().is_some() && key.as_str().is_some() => Some((
                    item.as_str().unwrap_or_default().to_owned(),
                    key.as_str().unwrap_or_default().to_owned(),
                )),
                _ => return Err(type_error("separators must be a pair of strings")),
            }
        }
        _ => None,
    };
    let sort_keys = arg(3, "sort_keys")?.is_some_and(|v| v.is_true());
    args.all_used()?;
    let (item_sep, key_sep) = separators.unwrap_or_else(|| {
        let item = if indent.is_some() { "," } else { ", " };
        (item.to_owned(), ": ".to_owned())
    });
    let style = JsonStyle {
        ensure_ascii,
        indent,
        item_sep,
        key_sep,
        sort_keys,
    };
    let mut out = String::new();
    style.value(&mut out, value, 0)?;
    Ok(Value::from(out))
}

/// Python's `json.dumps(value)` with its defaults (`", "` and `": "`
/// between items, non-ASCII escaped, keys in their order): how a client SDK
/// writes an arguments object as text.
pub fn python_json(value: &serde_json::Value) -> String {
    let style = JsonStyle {
        ensure_ascii: true,
        indent: None,
        item_sep: ", ".to_owned(),
        key_sep: ": ".to_owned(),
        sort_keys: false,
    };
    let mut out = String::new();
    // Every serde_json value is JSON serializable.
    let _ = style.value(&mut out, &json_value(value), 0);
    out
}

fn type_error(message: &str) -> Error {
    Error::new(ErrorKind::InvalidOperation, message.to_owned())
}

/// The `json.dumps` options of one `tojson` call.
struct JsonStyle {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

impl JsonStyle {
    fn value(&self, out: &mut String, value: &Value, level: usize) -> Result<(), Error> {
        match value.kind() {
            ValueKind::None | ValueKind::Bool | ValueKind::Number => out.push_str(&scalar(value)),
            ValueKind::String => self.string(out, value.as_str().unwrap_or_default()),
            ValueKind::Seq | ValueKind::Iterable if !is_generator(value) => {
                let items: Vec<Value> = value.try_iter()?.collect();
                self.container(out, ('[', ']'), items.len(), level, |out, i| {
                    self.value(out, &items[i], level + 1)
                })?;
            }
            ValueKind::Map => {
                let mut pairs: Vec<(Value, Value)> = value
                    .as_object()
                    .and_then(|obj| obj.try_iter_pairs())
                    .map(|it| it.collect())
                    .unwrap_or_default();
                if self.sort_keys {
                    // Python's sorted() refuses to compare str with numbers or None.
                    let is_str = |k: &Value| k.kind() == ValueKind::String;
                    let is_num =
                        |k: &Value| matches!(k.kind(), ValueKind::Number | ValueKind::Bool);
                    if pairs.len() > 1
                        && !pairs.iter().all(|(k, _)| is_str(k))
                        && !pairs.iter().all(|(k, _)| is_num(k))
                    {
                        return Err(type_error(
                            "tojson(sort_keys=True) cannot sort mixed key types",
                        ));
                    }
                    pairs.sort_by(|a, b| a.0.cmp(&b.0));
                }
                self.container(out, ('{', '}'), pairs.len(), level, |out, i| {
                    let (key, item) = &pairs[i];
                    self.key(out, key)?;
                    out.push_str(&self.key_sep);
                    self.value(out, item, level + 1)
                })?;
            }
            kind => {
                // Python's json.dumps refuses Undefined, generators (`x|map(...)` without `|list`),
                // macros and bytes.
                let name = match kind {
                    ValueKind::Undefined => "Undefined",
                    ValueKind::Iterable => "generator",
                    ValueKind::Bytes => "bytes",
                    _ => "object",
                };
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!("Object of type {name} is not JSON serializable"),
                ));
            }
        }
        Ok(())
    }

    /// Writes `open`, `len` items separated like `json.dumps` (a newline plus indentation per level
    /// when `indent` is set), and `close`; empty containers stay `[]` / `{}`.
    fn container(
        &self,
        out: &mut String,
        (open, close): (char, char),
        len: usize,
        level: usize,
        mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
    ) -> Result<(), Error> {
        out.push(open);
        if len == 0 {
            out.push(close);
            return Ok(());
        }
        for i in 0..len {
            if i > 0 {
                out.push_str(&self.item_sep);
            }
            self.newline(out, level + 1);
            item(out, i)?;
        }
        self.newline(out, level);
        out.push(close);
        Ok(())
    }

    fn newline(&self, out: &mut String, level: usize) {
        if let Some(indent) = &self.indent {
            out.push('\n');
            for _ in 0..level {
                out.push_str(indent);
            }
        }
    }

    /// Object keys as `json.dumps` converts them: strings as is, `True`/`False`/`None` as
    /// `true`/`false`/`null`, numbers as their repr; anything else is a TypeError.
    fn key(&self, out: &mut String, key: &Value) -> Result<(), Error> {
        match key.kind() {
            ValueKind::String => self.string(out, key.as_str().unwrap_or_default()),
            ValueKind::None | ValueKind::Bool | ValueKind::Number => self.string(out, &scalar(key)),
            _ => {
                return Err(type_error(
                    "keys must be str, int, float, bool or None for tojson",
                ))
            }
        }
        Ok(())
    }

    fn string(&self, out: &mut String, s: &str) {
        out.reserve(s.len() + 2);
        out.push('"');
        for c in s.chars() {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                '\u{8}' => out.push_str("\\b"),
                '\u{c}' => out.push_str("\\f"),
                c if (c as u32) < 0x20 => {
                    let _ = write!(out, "\\u{:04x}", c as u32);
                }
                c if self.ensure_ascii && !(' '..='~').contains(&c) => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        let _ = write!(out, "\\u{unit:04x}");
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
}

/// JSON text of `None`, a bool or a number: `null`, `true`/`false`, the integer, or Python's float
/// repr with `NaN`/`Infinity`/`-Infinity` (json.dumps' `allow_nan=True`).
fn scalar(value: &Value) -> String {
    match value.kind() {
        ValueKind::None => "null".to_owned(),
        ValueKind::Bool => if value.is_true() { "true" } else { "false" }.to_owned(),
        _ if value.is_integer() => value.to_string(),
        _ => match f64::try_from(value.clone()).unwrap_or(f64::NAN) {
            f if f.is_nan() => "NaN".to_owned(),
            f if f.is_infinite() => if f > 0.0 { "Infinity" } else { "-Infinity" }.to_owned(),
            f => python_float_repr(f),
        },
    }
}

// ---------------------------------------------------------------------------------------------
// Filters, tests and methods that behave like their Python/Jinja2 counterparts

/// The filter of rewrite rule 3 (`for x in (ITER)|__hf_iter`): Python cannot iterate `None`, numbers
/// or booleans; minijinja loops zero times over `none`. Undefined passes (Jinja2 iterates it empty).
fn hf_iter(value: Value) -> Result<Value, Error> {
    let type_name = match value.kind() {
        ValueKind::None => "NoneType",
        ValueKind::Bool => "bool",
        ValueKind::Number if value.is_integer() => "int",
        ValueKind::Number => "float",
        _ => return Ok(value),
    };
    Err(type_error(&format!("'{type_name}' object is not iterable")))
}

/// Jinja2's `iterable` test is `iter(x)` succeeding: true for strings, lists, dicts, generators and
/// Undefined, false for `None` (minijinja says `none is iterable`). Used as `tools is iterable`.
fn is_iterable(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::String
            | ValueKind::Bytes
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Iterable
            | ValueKind::Undefined
    )
}

/// Jinja2's `sequence` test is `len(x)` and `x.__getitem__` existing: true for strings, lists, tuples,
/// dicts and Undefined (minijinja says false for strings and dicts, and for `list + list`); false for
/// generators.
fn is_sequence(value: &Value) -> bool {
    match value.kind() {
        ValueKind::String | ValueKind::Bytes | ValueKind::Seq | ValueKind::Map => true,
        ValueKind::Undefined => true,
        ValueKind::Iterable => !is_generator(value),
        _ => false,
    }
}

/// Python's whitespace for `str.strip()`/`str.split()`: Unicode White_Space plus the ASCII
/// separators U+001C..U+001F, which Rust's `char::is_whitespace` excludes.
fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Jinja2's `int(default=0, base=10)`: `int(s, base)` for strings, else `int(x)`; on failure
/// `int(float(x))`; on failure `default`. minijinja raises instead (GigaChat3.5 runs `seg|int` on
/// arbitrary path segments). Undefined raises in both.
fn int_filter(
    value: &Value,
    default: Option<Value>,
    base: Option<u32>,
    kwargs: Kwargs,
) -> Result<Value, Error> {
    let default = match default {
        Some(default) => default,
        None => kwargs
            .get::<Option<Value>>("default")?
            .unwrap_or(Value::from(0)),
    };
    let base = match base {
        Some(base) => base,
        None => kwargs.get::<Option<u32>>("base")?.unwrap_or(10),
    };
    kwargs.assert_all_used()?;
    Ok(match value.kind() {
        ValueKind::Undefined => return Err(Error::from(ErrorKind::UndefinedError)),
        ValueKind::Bool => Value::from(i64::from(value.is_true())),
        ValueKind::Number if value.is_integer() => value.clone(),
        ValueKind::Number => f64::try_from(value.clone())
            .ok()
            .and_then(truncate_float)
            .unwrap_or(default),
        ValueKind::String => {
            let s = value.as_str().unwrap_or_default();
            parse_py_int(s, base)
                .map(Value::from)
                .or_else(|| parse_py_float(s).and_then(truncate_float))
                .unwrap_or(default)
        }
        _ => default,
    })
}

fn truncate_float(f: f64) -> Option<Value> {
    let t = f.trunc();
    (t.is_finite() && t.abs() < 1.7e38).then(|| Value::from(t as i128))
}

/// Python `int(s, base)`: surrounding whitespace, a sign, an optional `0x`/`0o`/`0b` prefix matching
/// the base (base 0 = by prefix), and single underscores between digits.
fn parse_py_int(s: &str, base: u32) -> Option<i128> {
    let s = s.trim_matches(is_py_space);
    let (negative, s) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let lower = s.get(..2).map(str::to_ascii_lowercase);
    let (base, digits) = match (base, lower.as_deref()) {
        (0 | 16, Some("0x")) => (16, &s[2..]),
        (0 | 8, Some("0o")) => (8, &s[2..]),
        (0 | 2, Some("0b")) => (2, &s[2..]),
        (0, _) => (10, s),
        (b, _) if (2..=36).contains(&b) => (b, s),
        _ => return None,
    };
    let digits = digits
        .strip_prefix('_')
        .filter(|_| digits.len() < s.len())
        .unwrap_or(digits);
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
    {
        return None;
    }
    let mut value: i128 = 0;
    for c in digits.chars().filter(|c| *c != '_') {
        let d = c.to_digit(base)?;
        value = value.checked_mul(base as i128)?.checked_add(d as i128)?;
    }
    Some(if negative { -value } else { value })
}

/// Python `float(s)`: surrounding whitespace, `inf`/`infinity`/`nan` in any case, and single
/// underscores between digits; Rust's parser accepts the rest of the same grammar.
fn parse_py_float(s: &str) -> Option<f64> {
    let s = s.trim_matches(is_py_space);
    if s.contains('_') {
        let bytes = s.as_bytes();
        let ok = bytes.iter().enumerate().all(|(i, &b)| {
            b != b'_'
                || (i > 0
                    && i + 1 < bytes.len()
                    && bytes[i - 1].is_ascii_digit()
                    && bytes[i + 1].is_ascii_digit())
        });
        return if ok {
            s.replace('_', "").parse().ok()
        } else {
            None
        };
    }
    s.parse().ok()
}

/// Jinja2's `float(default=0.0)`: `float(x)`, or `default` on failure (minijinja raises).
fn float_filter(value: &Value, default: Option<Value>, kwargs: Kwargs) -> Result<Value, Error> {
    let default = match default {
        Some(default) => default,
        None => kwargs
            .get::<Option<Value>>("default")?
            .unwrap_or(Value::from(0.0)),
    };
    kwargs.assert_all_used()?;
    Ok(match value.kind() {
        ValueKind::Undefined => return Err(Error::from(ErrorKind::UndefinedError)),
        ValueKind::Bool => Value::from(if value.is_true() { 1.0 } else { 0.0 }),
        ValueKind::Number => f64::try_from(value.clone())
            .map(Value::from)
            .unwrap_or(default),
        ValueKind::String => parse_py_float(value.as_str().unwrap_or_default())
            .map(Value::from)
            .unwrap_or(default),
        _ => default,
    })
}

/// Jinja2's `trim(chars=None)` is `str(x).strip(chars)`: Python's whitespace set (see [`is_py_space`]).
fn trim_filter(value: &Value, chars: Option<String>) -> Value {
    let owned;
    let s = match value.as_str() {
        Some(s) => s,
        None if value.is_undefined() => "",
        None => {
            owned = value.to_string();
            &owned
        }
    };
    Value::from(match chars {
        Some(chars) => s.trim_matches(|c| chars.contains(c)),
        None => s.trim_matches(is_py_space),
    })
}

/// The widest `indent` a template may ask for: a bound on what one call can
/// allocate per line, far above any real template's.
const MAX_INDENT: u64 = 4096;

/// Jinja2's `indent(width=4, first=False, blank=False)` as Jinja2 3.1 has it
/// (`filters.do_indent`): a newline is added before the text is split with
/// Python's `str.splitlines`, so a text that ends in a newline keeps it
/// (`'{\n'|indent(4, first=true)` is `'    {\n'`; minijinja's own drops it, which
/// changed Cohere command-r-plus's tool_use rendering). Lines are joined with
/// `\n` whatever broke them (`\r\n`, `\r`, `\f`, `\u2028`, ...); empty lines are
/// indented only with `blank`. A `width` string is the indentation itself.
/// Anything but a string is a TypeError there, and an error here.
fn indent_filter(value: &Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    let Some(text) = value.as_str() else {
        return Err(type_error(&format!(
            "indent expects a string, not {}",
            value.kind()
        )));
    };
    let args = args.into_values();
    let args = PythonArgs::parse(&args, "indent", 3)?;
    let arg = |index: usize, name: &str| args.get(index, name);
    let indentation = match arg(0, "width")? {
        None => " ".repeat(4),
        Some(v) if v.kind() == ValueKind::String => v.as_str().unwrap_or("").to_owned(),
        // Python's bool is an int: `True` is one space.
        Some(v) if v.kind() == ValueKind::Bool => " ".repeat(usize::from(v.is_true())),
        // A negative width is no indentation, as `" " * -1` is "".
        Some(v) if v.is_integer() => match v.as_i64().map(|n| n.max(0) as u64) {
            Some(n) if n <= MAX_INDENT => " ".repeat(n as usize),
            _ => return Err(type_error("indent's width is too large")),
        },
        Some(_) => return Err(type_error("indent's width must be an int or a string")),
    };
    let first = arg(1, "first")?.is_some_and(|v| v.is_true());
    let blank = arg(2, "blank")?.is_some_and(|v| v.is_true());
    args.all_used()?;
    let with_newline = format!("{text}\n");
    let lines = python_splitlines(&with_newline);
    let mut out = if blank {
        lines.join(&format!("\n{indentation}"))
    } else {
        // Never empty: the text has a line break at least.
        let (first, rest) = lines.split_first().unwrap_or((&"", &[]));
        let mut out = (*first).to_owned();
        for line in rest {
            out.push('\n');
            if !line.is_empty() {
                out.push_str(&indentation);
                out.push_str(line);
            }
        }
        out
    };
    if first {
        out.insert_str(0, &indentation);
    }
    Ok(Value::from(out))
}

/// Python's `str.splitlines()`: the lines without their breaks (`\n`, `\r\n`,
/// `\r`, `\v`, `\f`, `\x1c`-`\x1e`, `\x85`, `\u2028`, `\u2029`), and no empty
/// last line after a final break.
fn python_splitlines(text: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        let is_break = matches!(
            c,
            '\n' | '\r' | '\u{0b}' | '\u{0c}' | '\u{1c}'
                ..='\u{1e}' | '\u{85}' | '\u{2028}' | '\u{2029}'
        );
        if !is_break {
            continue;
        }
        lines.push(&text[start..at]);
        start = at + c.len_utf8();
        if c == '\r' && chars.peek().is_some_and(|&(_, next)| next == '\n') {
            chars.next();
            start += 1;
        }
    }
    if start < text.len() {
        lines.push(&text[start..]);
    }
    lines
}

/// Python's `str.strip/lstrip/rstrip()` and `str.split()` without a separator use Python whitespace
/// (see [`is_py_space`]); every other method goes to minijinja-contrib's Python compatibility layer.
fn python_method(
    state: &mut State,
    value: &Value,
    method: &str,
    args: &[Value],
) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        let no_chars = args.is_empty() || (args.len() == 1 && args[0].is_none());
        match method {
            "strip" if no_chars => return Ok(Value::from(s.trim_matches(is_py_space))),
            "lstrip" if no_chars => return Ok(Value::from(s.trim_start_matches(is_py_space))),
            "rstrip" if no_chars => return Ok(Value::from(s.trim_end_matches(is_py_space))),
            "split" if args.first().is_none_or(Value::is_none) && args.len() <= 2 => {
                let max_split = match args.get(1) {
                    Some(v) => v
                        .as_i64()
                        .ok_or_else(|| type_error("maxsplit must be an int"))?,
                    None => -1,
                };
                return Ok(Value::from(python_split_whitespace(s, max_split)));
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

/// Python's `str.split(None, maxsplit)`: runs of whitespace separate, leading whitespace is skipped,
/// and after `maxsplit` splits the rest is one item (its trailing whitespace kept).
fn python_split_whitespace(s: &str, max_split: i64) -> Vec<Value> {
    let mut parts = Vec::new();
    let mut rest = s.trim_start_matches(is_py_space);
    while !rest.is_empty() {
        if max_split >= 0 && parts.len() as i64 == max_split {
            parts.push(Value::from(rest));
            break;
        }
        match rest.find(is_py_space) {
            Some(end) => {
                parts.push(Value::from(&rest[..end]));
                rest = rest[end..].trim_start_matches(is_py_space);
            }
            None => {
                parts.push(Value::from(rest));
                break;
            }
        }
    }
    parts
}

/// Jinja2's `map`, `select`, `selectattr`, `reject` and `rejectattr` return generators: single pass,
/// always truthy, without a length, not a sequence, and refused by `tojson` (transformers fails on
/// `tools|map(attribute='function')|tojson`, minijinja's list would render). The builtin result is
/// wrapped in this type, which `tojson` and the `sequence` test recognise: minijinja represents
/// other things as plain iterables too, such as `list + list`, which is a real list in Python.
#[derive(Debug)]
struct Generator(Mutex<std::vec::IntoIter<Value>>);

impl Object for Generator {
    fn repr(self: &Arc<Self>) -> ObjectRepr {
        ObjectRepr::Iterable
    }

    fn enumerate(self: &Arc<Self>) -> Enumerator {
        let this = Arc::clone(self);
        Enumerator::Iter(Box::new(std::iter::from_fn(move || {
            this.0.lock().ok()?.next()
        })))
    }
}

fn is_generator(value: &Value) -> bool {
    value.downcast_object_ref::<Generator>().is_some()
}

fn lazy(items: Result<Vec<Value>, Error>) -> Result<Value, Error> {
    Ok(Value::from_object(Generator(Mutex::new(
        items?.into_iter(),
    ))))
}

fn lazy_map(state: &mut State, value: Value, args: Rest<ValueOrKwargs>) -> Result<Value, Error> {
    lazy(minijinja::filters::map(state, value, args))
}

fn lazy_select(
    state: &mut State,
    value: Value,
    test: Option<String>,
    args: Rest<ValueOrKwargs>,
) -> Result<Value, Error> {
    lazy(minijinja::filters::select(
        state,
        value,
        test.map(Into::into),
        args,
    ))
}

fn lazy_selectattr(
    state: &mut State,
    value: Value,
    attr: String,
    test: Option<String>,
    args: Rest<ValueOrKwargs>,
) -> Result<Value, Error> {
    lazy(minijinja::filters::selectattr(
        state,
        value,
        attr.into(),
        test.map(Into::into),
        args,
    ))
}

fn lazy_reject(
    state: &mut State,
    value: Value,
    test: Option<String>,
    args: Rest<ValueOrKwargs>,
) -> Result<Value, Error> {
    lazy(minijinja::filters::reject(
        state,
        value,
        test.map(Into::into),
        args,
    ))
}

fn lazy_rejectattr(
    state: &mut State,
    value: Value,
    attr: String,
    test: Option<String>,
    args: Rest<ValueOrKwargs>,
) -> Result<Value, Error> {
    lazy(minijinja::filters::rejectattr(
        state,
        value,
        attr.into(),
        test.map(Into::into),
        args,
    ))
}

// ---------------------------------------------------------------------------------------------
// Context

/// Keys the template always gets from transformers' `render(messages=..., tools=..., documents=...,
/// add_generation_prompt=..., **kwargs)`; a kwarg with one of these names is a Python TypeError.
const RESERVED: [&str; 4] = ["messages", "tools", "documents", "add_generation_prompt"];

fn build_context(input: &RenderInput<'_>) -> Result<Value, RenderError> {
    let messages = match input.messages {
        serde_json::Value::Array(list) => list
            .iter()
            .map(message_value)
            .collect::<Result<Vec<Value>, RenderError>>()?,
        _ => {
            return Err(RenderError::InvalidInput(
                "messages must be a list of message objects".into(),
            ))
        }
    };
    context(
        messages,
        input.tools,
        input.documents,
        input.add_generation_prompt,
        input.variables,
        input.now,
    )
}

/// The template's context: the messages as the template sees them, and the rest.
fn context(
    messages: Vec<Value>,
    tools: Option<&serde_json::Value>,
    documents: Option<&serde_json::Value>,
    add_generation_prompt: bool,
    variables: &serde_json::Map<String, serde_json::Value>,
    now: Clock,
) -> Result<Value, RenderError> {
    if let Some(key) = RESERVED.iter().find(|k| variables.contains_key(**k)) {
        return Err(RenderError::InvalidInput(format!(
            "variable {key:?} is set by the renderer itself"
        )));
    }
    let optional = |v: Option<&serde_json::Value>| v.map_or(Value::from(()), json_value);
    let mut pairs: Vec<(Value, Value)> = Vec::with_capacity(5 + variables.len());
    pairs.push((Value::from("messages"), Value::from(messages)));
    pairs.push((Value::from("tools"), optional(tools)));
    pairs.push((Value::from("documents"), optional(documents)));
    pairs.push((
        Value::from("add_generation_prompt"),
        Value::from(add_generation_prompt),
    ));
    pairs.push((Value::from(CLOCK_KEY), Value::from_object(ClockValue(now))));
    for (key, value) in variables {
        pairs.push((Value::from(key.as_str()), json_value(value)));
    }
    Ok(Value::from_pairs(pairs))
}

/// Reasoning fields transformers aliases, in its order of preference.
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];

/// One message as transformers hands it to the template. `apply_chat_template` first drops the
/// top-level keys whose value is `None` (OpenAI clients send `content: null` next to `tool_calls`,
/// and many templates print "None" or crash on it but handle a missing key); then
/// `render_jinja_template` copies the first non-null reasoning field to both `thinking` and
/// `reasoning_content`, as `{"thinking": r, **message, "reasoning_content": r}` (the key order
/// matters for `message|tojson` and `message.items()`).
fn message_value(message: &serde_json::Value) -> Result<Value, RenderError> {
    let serde_json::Value::Object(fields) = message else {
        return Err(RenderError::InvalidInput(format!(
            "chat messages must be objects, got {message}"
        )));
    };
    let reasoning = REASONING_FIELDS
        .iter()
        .find_map(|k| fields.get(*k).filter(|v| !v.is_null()));
    let mut pairs: Vec<(Value, Value)> = Vec::with_capacity(fields.len() + 2);
    if let Some(r) = reasoning {
        pairs.push((Value::from("thinking"), json_value(r)));
    }
    let mut has_reasoning_content = false;
    for (key, value) in fields {
        if value.is_null() {
            continue;
        }
        match (key.as_str(), reasoning) {
            ("thinking", Some(_)) => pairs[0].1 = json_value(value),
            ("reasoning_content", Some(r)) => {
                has_reasoning_content = true;
                pairs.push((Value::from("reasoning_content"), json_value(r)));
            }
            _ => pairs.push((Value::from(key.as_str()), json_value(value))),
        }
    }
    if let (Some(r), false) = (reasoning, has_reasoning_content) {
        pairs.push((Value::from("reasoning_content"), json_value(r)));
    }
    Ok(Value::from_pairs(pairs))
}

/// JSON to template values: objects become insertion-ordered maps (with `serde_json`'s
/// `preserve_order`, the order of the request), integers stay integers, other numbers are floats.
fn json_value(value: &serde_json::Value) -> Value {
    match value {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => Value::from(u),
            (None, Some(i)) => Value::from(i),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(items) => {
            Value::from(items.iter().map(json_value).collect::<Vec<_>>())
        }
        serde_json::Value::Object(fields) => Value::from_pairs(
            fields
                .iter()
                .map(|(k, v)| (Value::from(k.as_str()), json_value(v))),
        ),
    }
}

#[cfg(test)]
mod plain_tests {
    use super::*;

    #[test]
    fn plain_messages_render_as_their_json_does() {
        let dir = todod_fixtures::fixture("chat_templates");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).expect("the chat templates' folder") {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "jinja") {
                continue;
            }
            let source = std::fs::read_to_string(&path).unwrap();
            let Ok(template) = ChatTemplate::from_source(&source) else {
                continue;
            };
            let messages = [
                ("system", "Be brief."),
                ("user", "Hello {{ there }} <|im_start|>"),
                ("assistant", "Hi."),
                ("user", "Bye\n"),
            ];
            let json = serde_json::Value::Array(
                messages
                    .iter()
                    .map(|(r, c)| serde_json::json!({"role": r, "content": c}))
                    .collect(),
            );
            let variables = serde_json::Map::new();
            let now = Clock::at_unix(1_768_000_000);
            for add in [false, true] {
                let via_json = template.render(&RenderInput {
                    messages: &json,
                    tools: None,
                    documents: None,
                    add_generation_prompt: add,
                    variables: &variables,
                    now,
                });
                let plain = template.render_plain(&messages, add, &variables, now);
                match (via_json, plain) {
                    (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", path.display()),
                    (Err(_), Err(_)) => {}
                    (a, b) => panic!("{}: {a:?} vs {b:?}", path.display()),
                }
                checked += 1;
            }
        }
        assert!(checked > 40, "only {checked} renderings compared");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::path::PathBuf;

    /// The repository's `fixtures/chat_templates`.
    fn fixtures_dir() -> PathBuf {
        todod_fixtures::fixture("chat_templates/cases.jsonl")
            .parent()
            .expect("a folder")
            .to_path_buf()
    }

    fn fixed(now: &str) -> Clock {
        Clock::Fixed(NaiveDateTime::parse_from_str(now, "%Y-%m-%dT%H:%M:%S").expect("case time"))
    }

    /// Jinja2's `indent` byte for byte: each row's expectation is what
    /// Jinja2 3.1.6 rendered for `{{ s|CALL }}` (a trailing newline kept,
    /// Python's line breaks, `first`, `blank`, a string width); a
    /// non-string is an error, as its TypeError.
    #[test]
    fn indent_is_jinja2s() {
        let rows: &[(&str, &str, &str)] = &[
            ("{\n", "indent", "{\n"),
            ("{\n", "indent(2)", "{\n"),
            ("{\n", "indent(4, first=true)", "    {\n"),
            ("{\n", "indent(4, true)", "    {\n"),
            ("{\n", "indent(2, blank=true)", "{\n  "),
            ("{\n", "indent('--', first=true, blank=true)", "--{\n--"),
            ("{\n", "indent(width=3)", "{\n"),
            ("{\n", "indent(-1, first=true)", "{\n"),
            ("{\n", "indent(true, true)", " {\n"),
            ("a\nb", "indent", "a\n    b"),
            ("a\nb", "indent(2)", "a\n  b"),
            ("a\nb", "indent(4, first=true)", "    a\n    b"),
            ("a\nb", "indent(4, true)", "    a\n    b"),
            ("a\nb", "indent(2, blank=true)", "a\n  b"),
            ("a\nb", "indent('--', first=true, blank=true)", "--a\n--b"),
            ("a\nb", "indent(width=3)", "a\n   b"),
            ("a\nb", "indent(-1, first=true)", "a\nb"),
            ("a\nb", "indent(true, true)", " a\n b"),
            ("a\n\nb\n", "indent", "a\n\n    b\n"),
            ("a\n\nb\n", "indent(2)", "a\n\n  b\n"),
            ("a\n\nb\n", "indent(4, first=true)", "    a\n\n    b\n"),
            ("a\n\nb\n", "indent(4, true)", "    a\n\n    b\n"),
            ("a\n\nb\n", "indent(2, blank=true)", "a\n  \n  b\n  "),
            (
                "a\n\nb\n",
                "indent('--', first=true, blank=true)",
                "--a\n--\n--b\n--",
            ),
            ("a\n\nb\n", "indent(width=3)", "a\n\n   b\n"),
            ("a\n\nb\n", "indent(-1, first=true)", "a\n\nb\n"),
            ("a\n\nb\n", "indent(true, true)", " a\n\n b\n"),
            ("", "indent", ""),
            ("", "indent(2)", ""),
            ("", "indent(4, first=true)", "    "),
            ("", "indent(4, true)", "    "),
            ("", "indent(2, blank=true)", ""),
            ("", "indent('--', first=true, blank=true)", "--"),
            ("", "indent(width=3)", ""),
            ("", "indent(-1, first=true)", ""),
            ("", "indent(true, true)", " "),
            ("\n", "indent", "\n"),
            ("\n", "indent(2)", "\n"),
            ("\n", "indent(4, first=true)", "    \n"),
            ("\n", "indent(4, true)", "    \n"),
            ("\n", "indent(2, blank=true)", "\n  "),
            ("\n", "indent('--', first=true, blank=true)", "--\n--"),
            ("\n", "indent(width=3)", "\n"),
            ("\n", "indent(-1, first=true)", "\n"),
            ("\n", "indent(true, true)", " \n"),
            ("a\r\nb\n", "indent", "a\n    b\n"),
            ("a\r\nb\n", "indent(2)", "a\n  b\n"),
            ("a\r\nb\n", "indent(4, first=true)", "    a\n    b\n"),
            ("a\r\nb\n", "indent(4, true)", "    a\n    b\n"),
            ("a\r\nb\n", "indent(2, blank=true)", "a\n  b\n  "),
            (
                "a\r\nb\n",
                "indent('--', first=true, blank=true)",
                "--a\n--b\n--",
            ),
            ("a\r\nb\n", "indent(width=3)", "a\n   b\n"),
            ("a\r\nb\n", "indent(-1, first=true)", "a\nb\n"),
            ("a\r\nb\n", "indent(true, true)", " a\n b\n"),
            ("a\rb", "indent", "a\n    b"),
            ("a\rb", "indent(2)", "a\n  b"),
            ("a\rb", "indent(4, first=true)", "    a\n    b"),
            ("a\rb", "indent(4, true)", "    a\n    b"),
            ("a\rb", "indent(2, blank=true)", "a\n  b"),
            ("a\rb", "indent('--', first=true, blank=true)", "--a\n--b"),
            ("a\rb", "indent(width=3)", "a\n   b"),
            ("a\rb", "indent(-1, first=true)", "a\nb"),
            ("a\rb", "indent(true, true)", " a\n b"),
            ("x\u{c}y\u{1c}z", "indent", "x\n    y\n    z"),
            ("x\u{c}y\u{1c}z", "indent(2)", "x\n  y\n  z"),
            (
                "x\u{c}y\u{1c}z",
                "indent(4, first=true)",
                "    x\n    y\n    z",
            ),
            ("x\u{c}y\u{1c}z", "indent(4, true)", "    x\n    y\n    z"),
            ("x\u{c}y\u{1c}z", "indent(2, blank=true)", "x\n  y\n  z"),
            (
                "x\u{c}y\u{1c}z",
                "indent('--', first=true, blank=true)",
                "--x\n--y\n--z",
            ),
            ("x\u{c}y\u{1c}z", "indent(width=3)", "x\n   y\n   z"),
            ("x\u{c}y\u{1c}z", "indent(-1, first=true)", "x\ny\nz"),
            ("x\u{c}y\u{1c}z", "indent(true, true)", " x\n y\n z"),
            ("a\u{2028}b", "indent", "a\n    b"),
            ("a\u{2028}b", "indent(2)", "a\n  b"),
            ("a\u{2028}b", "indent(4, first=true)", "    a\n    b"),
            ("a\u{2028}b", "indent(4, true)", "    a\n    b"),
            ("a\u{2028}b", "indent(2, blank=true)", "a\n  b"),
            (
                "a\u{2028}b",
                "indent('--', first=true, blank=true)",
                "--a\n--b",
            ),
            ("a\u{2028}b", "indent(width=3)", "a\n   b"),
            ("a\u{2028}b", "indent(-1, first=true)", "a\nb"),
            ("a\u{2028}b", "indent(true, true)", " a\n b"),
            ("  one\n\n  two\n\n", "indent", "  one\n\n      two\n\n"),
            ("  one\n\n  two\n\n", "indent(2)", "  one\n\n    two\n\n"),
            (
                "  one\n\n  two\n\n",
                "indent(4, first=true)",
                "      one\n\n      two\n\n",
            ),
            (
                "  one\n\n  two\n\n",
                "indent(4, true)",
                "      one\n\n      two\n\n",
            ),
            (
                "  one\n\n  two\n\n",
                "indent(2, blank=true)",
                "  one\n  \n    two\n  \n  ",
            ),
            (
                "  one\n\n  two\n\n",
                "indent('--', first=true, blank=true)",
                "--  one\n--\n--  two\n--\n--",
            ),
            (
                "  one\n\n  two\n\n",
                "indent(width=3)",
                "  one\n\n     two\n\n",
            ),
            (
                "  one\n\n  two\n\n",
                "indent(-1, first=true)",
                "  one\n\n  two\n\n",
            ),
            (
                "  one\n\n  two\n\n",
                "indent(true, true)",
                "   one\n\n   two\n\n",
            ),
        ];
        for (text, call, expected) in rows {
            let source = format!("{{{{ s|{call} }}}}");
            let got = render_str(&source, serde_json::json!({ "s": text })).unwrap();
            assert_eq!(&got, expected, "{text:?}|{call}");
        }
        for bad in [
            "{{ 12|indent }}",
            "{{ s|indent(1.5) }}",
            "{{ s|indent(100000) }}",
        ] {
            assert!(
                render_str(bad, serde_json::json!({ "s": "a" })).is_err(),
                "{bad}"
            );
        }
    }

    fn render_str(source: &str, variables: serde_json::Value) -> Result<String, RenderError> {
        let template = ChatTemplate::from_source(source).expect("compiles");
        let serde_json::Value::Object(variables) = variables else {
            panic!("variables must be an object")
        };
        template.render(&RenderInput {
            messages: &serde_json::json!([]),
            tools: None,
            documents: None,
            add_generation_prompt: false,
            variables: &variables,
            now: fixed("2026-01-15T09:30:00"),
        })
    }

    /// The goldens of `file` (in fixtures/chat_templates) rendered: how many there are, and a line
    /// for each that is not byte for byte (an error case must fail, and a `raise_exception` one
    /// with the template's message).
    fn check_goldens(file: &str) -> (usize, Vec<String>) {
        let dir = fixtures_dir();
        let cases = std::fs::read_to_string(dir.join(file)).expect(file);
        let mut templates: HashMap<String, ChatTemplate> = HashMap::new();
        let (mut total, mut failures) = (0, Vec::new());
        for line in cases.lines().filter(|l| !l.trim().is_empty()) {
            total += 1;
            let case: serde_json::Value = serde_json::from_str(line).expect("case is JSON");
            let name = case["template"].as_str().expect("template name").to_owned();
            let label = format!("{name} / {}", case["case"].as_str().unwrap_or("?"));
            let template = templates.entry(name.clone()).or_insert_with(|| {
                let bytes = std::fs::read(dir.join(&name)).expect("read template");
                let source = String::from_utf8(bytes).expect("template is UTF-8");
                ChatTemplate::from_source(&source).unwrap_or_else(|e| panic!("{name}: {e}"))
            });
            let tools = case.get("tools").filter(|t| !t.is_null());
            let variables = case["context"].as_object().cloned().unwrap_or_default();
            let result = template.render(&RenderInput {
                messages: &case["messages"],
                tools,
                documents: None,
                add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap_or(false),
                variables: &variables,
                now: fixed(case["now"].as_str().expect("now")),
            });
            let ok = match (case.get("expected").and_then(|e| e.as_str()), &result) {
                (Some(expected), Ok(got)) => got == expected,
                (None, Err(err)) => {
                    let want = case["error"].as_str().unwrap_or_default();
                    match want.strip_prefix("TemplateError: ") {
                        Some(message) => matches!(err, RenderError::Raised(m) if m == message),
                        None => !matches!(err, RenderError::Raised(_)),
                    }
                }
                _ => false,
            };
            if !ok {
                failures.push(format!("{label}: got {result:?}"));
            }
        }
        println!(
            "chat-template goldens of {file}: {}/{total} byte-exact",
            total - failures.len()
        );
        (total, failures)
    }

    /// Every golden of cases.jsonl (made with transformers' own renderer) byte for byte.
    #[test]
    fn transformers_goldens() {
        let (total, failures) = check_goldens("cases.jsonl");
        assert!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert_eq!(total, 184, "cases.jsonl changed size");
    }

    /// The goldens cases.jsonl does not cover (jinja2_cases.jsonl, made in transformers'
    /// environment by bench/golden_cases.py): Cohere command-r-plus's tool_use template with tool
    /// calls, whose arguments go through Jinja2's `indent` and keep its trailing newline.
    #[test]
    fn jinja2_goldens() {
        let (total, failures) = check_goldens("jinja2_cases.jsonl");
        assert!(
            failures.is_empty(),
            "{} failures:\n{}",
            failures.len(),
            failures.join("\n")
        );
        assert_eq!(total, 3, "jinja2_cases.jsonl changed size");
    }

    /// fixtures/prompts: the 300 conversations rendered with Qwen3's template by transformers
    /// (`enable_thinking=false`, `add_generation_prompt=true`).
    #[test]
    fn qwen3_prompt_set() {
        let fixtures = fixtures_dir().join("..");
        let read = |name: &str| std::fs::read_to_string(fixtures.join(name)).expect(name);
        let source = read("chat_templates/Qwen-Qwen3-0.6B.jinja");
        let template = ChatTemplate::from_source(&source).unwrap();
        let mut variables = serde_json::Map::new();
        variables.insert("enable_thinking".into(), false.into());
        let expected: HashMap<String, String> = read("prompts/qwen3_rendered.jsonl")
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
            .map(|r| {
                (
                    r["id"].as_str().unwrap().into(),
                    r["text"].as_str().unwrap().into(),
                )
            })
            .collect();
        let conversations = read("prompts/openai_messages.jsonl");
        let mut same = 0;
        for line in conversations.lines().filter(|l| !l.trim().is_empty()) {
            let conv: serde_json::Value = serde_json::from_str(line).unwrap();
            let out = template
                .render(&RenderInput {
                    messages: &conv["messages"],
                    tools: None,
                    documents: None,
                    add_generation_prompt: true,
                    variables: &variables,
                    now: Clock::SystemUtc,
                })
                .unwrap();
            same += usize::from(expected[conv["id"].as_str().unwrap()] == out);
        }
        assert_eq!((same, expected.len()), (300, 300));
    }

    #[test]
    fn raise_exception_keeps_the_message() {
        let err = render_str(
            "{% macro m() %}{{ raise_exception('No system role!') }}{% endmacro %}{{ m() }}",
            serde_json::json!({}),
        )
        .unwrap_err();
        assert!(
            matches!(&err, RenderError::Raised(m) if m == "No system role!"),
            "{err:?}"
        );
        assert_eq!(err.to_string(), "No system role!");
        let err = render_str("{{ x.y.z }}", serde_json::json!({})).unwrap_err();
        assert!(matches!(err, RenderError::Template(_)), "{err:?}");
        let err =
            render_str("{% for t in tools %}{% endfor %}", serde_json::json!({})).unwrap_err();
        assert!(
            err.to_string()
                .contains("'NoneType' object is not iterable"),
            "{err}"
        );
    }

    #[test]
    fn syntax_errors_are_template_errors() {
        assert!(matches!(
            ChatTemplate::from_source("{% if %}"),
            Err(TemplateError::Syntax(_))
        ));
        assert!(matches!(
            ChatTemplate::from_source("{% do x %}"),
            Err(TemplateError::Syntax(_))
        ));
    }

    #[test]
    fn errors_and_templates_are_thread_safe() {
        fn check<T: Send + Sync + 'static>() {}
        check::<ChatTemplate>();
        check::<RenderError>();
        check::<TemplateError>();
    }

    #[test]
    fn tojson_is_python_json_dumps() {
        let vars = serde_json::json!({"x": {"a": [1, 2.0, {"b": null}], "e": [], "f": {}, "g": "é🚀\"\\/\n\u{1}<&>'", "n": 1.5e-7, "big": 1e16}});
        assert_eq!(
            render_str("{{ x|tojson }}", vars.clone()).unwrap(),
            r#"{"a": [1, 2.0, {"b": null}], "e": [], "f": {}, "g": "é🚀\"\\/\n\u0001<&>'", "n": 1.5e-07, "big": 1e+16}"#
        );
        assert_eq!(
            render_str(
                "{{ x.g|tojson(true) }}|{{ x.g|tojson(ensure_ascii=true) }}",
                vars.clone()
            )
            .unwrap(),
            r#""\u00e9\ud83d\ude80\"\\/\n\u0001<&>'"|"\u00e9\ud83d\ude80\"\\/\n\u0001<&>'""#
        );
        assert_eq!(
            render_str(
                "{{ {'a': [1, {}], 'b': []}|tojson(indent=2) }}",
                serde_json::json!({})
            )
            .unwrap(),
            "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": []\n}"
        );
        assert!(render_str(
            "{{ {'b': 1, 3: none}|tojson(sort_keys=true) }}",
            serde_json::json!({})
        )
        .is_err());
        assert_eq!(
            render_str("{{ {3: none, true: 1.0, 2.5: 'x'}|tojson(sort_keys=true) }}|{{ {3: none, true: 1.0}|tojson }}", serde_json::json!({})).unwrap(),
            r#"{"true": 1.0, "2.5": "x", "3": null}|{"3": null, "true": 1.0}"#
        );
        assert_eq!(
            render_str(
                "{{ {'b': 1, 'a': 2}|tojson(sort_keys=true, separators=(',', ':')) }}",
                serde_json::json!({})
            )
            .unwrap(),
            r#"{"a":2,"b":1}"#
        );
        assert!(render_str("{{ undefined_thing|tojson }}", serde_json::json!({})).is_err());
        assert!(render_str("{{ [1]|map('string')|tojson }}", serde_json::json!({})).is_err());
    }

    #[test]
    fn floats_print_like_python() {
        let cases = [
            (0.1, "0.1"),
            (2.0, "2.0"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (1.5e-7, "1.5e-07"),
            (0.0001, "0.0001"),
            (1e-5, "1e-05"),
            (-0.0, "-0.0"),
            (123456789.125, "123456789.125"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
        ];
        for (f, want) in cases {
            assert_eq!(python_float_repr(f), want, "{f:e}");
        }
        assert_eq!(
            render_str(
                "{{ 1e20 }} {{ 4/2 }} {{ x }}",
                serde_json::json!({"x": 2.5e-8})
            )
            .unwrap(),
            "1e+20 2.0 2.5e-08"
        );
    }

    #[test]
    fn python_string_and_number_semantics() {
        let vars = serde_json::json!({"s": "\u{1c} a  b \u{1f}"});
        assert_eq!(
            render_str(
                "[{{ s.strip() }}]|{{ s.split()|length }}|[{{ s|trim }}]|{{ s.split(none, 1)[1] }}",
                vars
            )
            .unwrap(),
            "[a  b]|2|[a  b]|b \u{1f}"
        );
        assert_eq!(render_str("{{ 'x'|int }} {{ '12'|int }} {{ ' 1_0 '|int }} {{ '2.7'|int }} {{ 3.9|int }} {{ 'x'|int(7) }} {{ 'ff'|int(base=16) }}", serde_json::json!({})).unwrap(), "0 12 10 2 3 7 255");
        assert_eq!(
            render_str(
                "{{ 'x'|float }} {{ '1e3'|float }} {{ true|float }}",
                serde_json::json!({})
            )
            .unwrap(),
            "0.0 1000.0 1.0"
        );
        assert_eq!(render_str("{{ none is iterable }} {{ 'a' is sequence }} {{ {} is sequence }} {{ 1 is iterable }}", serde_json::json!({})).unwrap(), "False True True False");
        assert_eq!(
            render_str("{{ '\\/' }}|{{ 'a\\\nb' }}", serde_json::json!({})).unwrap(),
            "\\/|ab"
        );
    }

    #[test]
    fn strftime_now_uses_the_clock() {
        assert_eq!(
            render_str(
                "{{ strftime_now('%Y-%m-%d|%d %b %Y|%B %d, %Y|%A %H:%M:%S %p %j|%f|%z%Z|%%') }}",
                serde_json::json!({})
            )
            .unwrap(),
            "2026-01-15|15 Jan 2026|January 15, 2026|Thursday 09:30:00 AM 015|000000||%"
        );
        assert!(render_str("{{ strftime_now('%Q') }}", serde_json::json!({})).is_err());
        assert_eq!(
            render_str(
                "{% macro d() %}{{ strftime_now('%Y') }}{% endmacro %}{{ d() }}",
                serde_json::json!({})
            )
            .unwrap(),
            "2026"
        );
    }

    #[test]
    fn messages_are_normalised_like_transformers() {
        let template =
            ChatTemplate::from_source("{% for m in messages %}{{ m|tojson }}\n{% endfor %}")
                .unwrap();
        let messages = serde_json::json!([
            {"role": "assistant", "content": null, "tool_calls": [{"id": "1"}]},
            {"role": "assistant", "content": "x", "reasoning": "r"},
            {"role": "assistant", "reasoning_content": "a", "content": "x", "thinking": "b"},
        ]);
        let out = template
            .render(&RenderInput {
                messages: &messages,
                tools: None,
                documents: None,
                add_generation_prompt: false,
                variables: &serde_json::Map::new(),
                now: Clock::SystemUtc,
            })
            .unwrap();
        assert_eq!(
            out,
            concat!(
                r#"{"role": "assistant", "tool_calls": [{"id": "1"}]}"#,
                "\n",
                r#"{"thinking": "r", "role": "assistant", "content": "x", "reasoning": "r", "reasoning_content": "r"}"#,
                "\n",
                r#"{"thinking": "b", "role": "assistant", "reasoning_content": "a", "content": "x"}"#,
                "\n",
            )
        );
        let bad = serde_json::json!(["hi"]);
        let err = template
            .render(&RenderInput {
                messages: &bad,
                tools: None,
                documents: None,
                add_generation_prompt: false,
                variables: &serde_json::Map::new(),
                now: Clock::SystemUtc,
            })
            .unwrap_err();
        assert!(matches!(err, RenderError::InvalidInput(_)));
    }

    #[test]
    fn tokenizer_config_selection() {
        let config = serde_json::json!({
            "chat_template": [
                {"name": "default", "template": "D{{ bos_token }}"},
                {"name": "tool_use", "template": "T"},
            ],
            "bos_token": {"content": "<s>", "lstrip": false},
            "eos_token": "</s>",
        });
        let (template, tokens) = ChatTemplate::from_tokenizer_config(&config, None).unwrap();
        assert_eq!(tokens.bos_token.as_deref(), Some("<s>"));
        assert_eq!(tokens.eos_token.as_deref(), Some("</s>"));
        let mut variables = serde_json::Map::new();
        tokens.insert_into(&mut variables);
        let out = template
            .render(&RenderInput {
                messages: &serde_json::json!([]),
                tools: None,
                documents: None,
                add_generation_prompt: false,
                variables: &variables,
                now: Clock::SystemUtc,
            })
            .unwrap();
        assert_eq!(out, "D<s>");
        assert_eq!(
            template.sha256(),
            "2074638ed334dd22cf52ece213c938c5409cd2c01b2ce573b2d60be76ea34564"
        );
        assert!(ChatTemplate::from_tokenizer_config(&config, Some("tool_use")).is_ok());
        assert!(matches!(
            ChatTemplate::from_tokenizer_config(&config, Some("rag")),
            Err(TemplateError::NotFound { .. })
        ));
        assert!(matches!(
            ChatTemplate::from_tokenizer_config(&serde_json::json!({}), None),
            Err(TemplateError::Missing)
        ));
    }
}
