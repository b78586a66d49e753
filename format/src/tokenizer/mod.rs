//! Tokenizers of a model directory, behind one interface.
//!
//! A model directory is laid out as on the Hugging Face Hub, and one of two
//! kinds of tokenizer is found in it:
//!
//! * `tokenizer.json` (with an optional `tokenizer_config.json`): run by the
//!   Rust `tokenizers` crate, the engine of Python `tokenizers`/transformers'
//!   fast tokenizers. Built with `fancy-regex` instead of oniguruma so that no
//!   C is compiled; the SmolLM2 fixture guards that the two engines agree.
//! * `tiktoken.model` + `tokenizer_config.json`, laid out as Kimi K2's: run by
//!   our own port of tiktoken's `CoreBPE`, with the special tokens, split
//!   pattern and chunking of Kimi's `tokenization_kimi.py` (see [`tiktoken`]).
//!
//! Either way, special tokens that occur in the text are parsed as the model's
//! own tokenizer parses them, and nothing (BOS/EOS) is added.
//!
//! [`load_dir`] also reads what a data pipeline needs besides the encoder:
//! BOS/EOS, the chat template, and a content hash of the files (the
//! tokenizer's identity, so that outputs can record what produced them).

mod hf;
#[cfg(test)]
mod tests;
mod tiktoken;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// The ids of one text, with where each came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Encoded {
    pub ids: Vec<u32>,
    /// Byte offsets into the text, one `(start, end)` per id; empty unless
    /// offsets were asked for. For `tokenizer.json` they are the `tokenizers`
    /// crate's byte offsets: a byte-level token that holds only part of a
    /// multi-byte character gets that whole character's span. For tiktoken
    /// they come from the decoded bytes of each token, accumulated, so they
    /// tile the text exactly but may fall inside a UTF-8 character: slice
    /// `text.as_bytes()`, not `text`.
    pub offsets: Vec<(usize, usize)>,
}

/// A tokenizer, whatever its kind.
pub trait Tokenizer: Send + Sync {
    /// Special tokens in the text are parsed as the model's own tokenizer does
    /// (HF: added tokens always; Kimi: `allowed_special="all"`). No BOS/EOS is
    /// added. `offsets` asks for [`Encoded::offsets`]; leaving it off is faster.
    fn encode(&self, text: &str, offsets: bool) -> Result<Encoded, TokenizeError>;
    /// Base plus added/special tokens: what Megatron's dtype choice uses
    /// (`len(tokenizer)` for HF, `n_vocab` for tiktoken).
    fn vocab_size(&self) -> usize;
    /// The id of a token (special or not) given as its text.
    fn token_id(&self, token: &str) -> Option<u32>;
    /// `"tokenizer.json"` or `"tiktoken"`.
    fn kind(&self) -> &'static str;
}

/// A loaded model directory.
pub struct Loaded {
    pub tokenizer: Arc<dyn Tokenizer>,
    pub bos_token: Option<String>,
    pub eos_token: Option<String>,
    /// `eos_token`'s id, when the tokenizer knows it.
    pub eos_id: Option<u32>,
    /// `chat_template` from `tokenizer_config.json`, raw: a string, or a list
    /// of `{name, template}` objects.
    pub chat_template: Option<serde_json::Value>,
    /// `(file name, sha256 hex)` of every file that was read, sorted by name.
    pub files: Vec<(String, String)>,
    /// The tokenizer's identity: sha256 hex over `files`, see [`identity`].
    pub identity: String,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("kind", &self.tokenizer.kind())
            .field("vocab_size", &self.tokenizer.vocab_size())
            .field("bos_token", &self.bos_token)
            .field("eos_token", &self.eos_token)
            .field("eos_id", &self.eos_id)
            .field("files", &self.files)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: no tokenizer found: expected tokenizer.json, or tiktoken.model with tokenizer_config.json",
        dir.display()
    )]
    NotFound { dir: PathBuf },
    #[error("{}: {message}", path.display())]
    Invalid { path: PathBuf, message: String },
    #[error("tokenizing failed: {0}")]
    Encode(String),
}

const TOKENIZER_JSON: &str = "tokenizer.json";
const TOKENIZER_CONFIG: &str = "tokenizer_config.json";
const TIKTOKEN_MODEL: &str = "tiktoken.model";

/// Whether `dir` holds a tokenizer [`load_dir`] would try to load.
pub fn has_tokenizer(dir: &Path) -> bool {
    dir.join(TOKENIZER_JSON).is_file() || dir.join(TIKTOKEN_MODEL).is_file()
}

/// A model directory as laid out on the Hub: `tokenizer.json` (+
/// `tokenizer_config.json`), or `tiktoken.model` + `tokenizer_config.json`
/// (Kimi K2 style). Chosen by what is there: `tokenizer.json` wins, unless
/// `tiktoken.model` is there too and the config's `tokenizer_class` names a
/// TikToken tokenizer, because that is what transformers would then run.
pub fn load_dir(dir: &Path) -> Result<Loaded, TokenizeError> {
    let mut files = Vec::new();
    let config_path = dir.join(TOKENIZER_CONFIG);
    let config = match read_file(&config_path) {
        Ok(bytes) => {
            let config: TokenizerConfig = parse_json(&config_path, &bytes)?;
            files.push((TOKENIZER_CONFIG.to_string(), sha256_hex(&bytes)));
            Some(config)
        }
        Err(TokenizeError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            None
        }
        Err(e) => return Err(e),
    };

    let has_json = dir.join(TOKENIZER_JSON).is_file();
    let has_tiktoken = dir.join(TIKTOKEN_MODEL).is_file();
    let wants_tiktoken = config
        .as_ref()
        .and_then(|c| c.tokenizer_class.as_deref())
        .is_some_and(|class| class.to_ascii_lowercase().contains("tiktoken"));

    let tokenizer: Arc<dyn Tokenizer> = if has_json && !(has_tiktoken && wants_tiktoken) {
        let path = dir.join(TOKENIZER_JSON);
        // Read the bytes once, hash them and parse those same bytes
        // (`from_file` would read the file a second time).
        let bytes = read_file(&path)?;
        files.push((TOKENIZER_JSON.to_string(), sha256_hex(&bytes)));
        Arc::new(hf::HfTokenizer::from_bytes(&path, &bytes)?)
    } else if has_tiktoken {
        // Kimi's tokenizer cannot be built without its config: the special
        // tokens and their ids come from `added_tokens_decoder`.
        let config = config.as_ref().ok_or_else(|| TokenizeError::Invalid {
            path: config_path.clone(),
            message: format!("missing: {TIKTOKEN_MODEL} needs it for its special tokens"),
        })?;
        let path = dir.join(TIKTOKEN_MODEL);
        let bytes = read_file(&path)?;
        files.push((TIKTOKEN_MODEL.to_string(), sha256_hex(&bytes)));
        let named = config.named_specials(&config_path)?;
        Arc::new(tiktoken::Tiktoken::from_model(
            &path,
            &bytes,
            &config_path,
            &named,
            config.pat_str.as_deref(),
        )?)
    } else {
        return Err(TokenizeError::NotFound {
            dir: dir.to_path_buf(),
        });
    };

    files.sort();
    let (bos_token, eos_token, chat_template) = match config {
        Some(c) => (
            c.bos_token.map(TokenSpec::into_content),
            c.eos_token.map(TokenSpec::into_content),
            c.chat_template,
        ),
        None => (None, None, None),
    };
    let eos_id = eos_token.as_deref().and_then(|t| tokenizer.token_id(t));
    let identity = identity(&files);
    Ok(Loaded {
        tokenizer,
        bos_token,
        eos_token,
        eos_id,
        chat_template,
        files,
        identity,
    })
}

/// sha256 hex over `name NUL sha256hex LF` for each `(name, sha256hex)`
/// pair, in sorted order, so that the identity depends on the content of the
/// files and their roles, not on the directory's path or the order of reads.
pub fn identity(files: &[(String, String)]) -> String {
    let mut sorted: Vec<&(String, String)> = files.iter().collect();
    sorted.sort();
    let mut h = Sha256::new();
    for (name, sha) in sorted {
        h.update(name.as_bytes());
        h.update([0]);
        h.update(sha.as_bytes());
        h.update([b'\n']);
    }
    hex(&h.finalize())
}

/// The parts of `tokenizer_config.json` we use; the rest is ignored.
#[derive(Deserialize)]
struct TokenizerConfig {
    #[serde(default)]
    bos_token: Option<TokenSpec>,
    #[serde(default)]
    eos_token: Option<TokenSpec>,
    #[serde(default)]
    chat_template: Option<serde_json::Value>,
    #[serde(default)]
    tokenizer_class: Option<String>,
    /// `{"163584": {"content": "[BOS]", ...}, ...}`
    #[serde(default)]
    added_tokens_decoder: BTreeMap<String, AddedToken>,
    /// Not in Kimi K2's own config; the fixture carries it for convenience.
    #[serde(default)]
    pat_str: Option<String>,
}

impl TokenizerConfig {
    /// `added_tokens_decoder` as `(id, content)`, ids parsed.
    fn named_specials(&self, path: &Path) -> Result<Vec<(u32, String)>, TokenizeError> {
        self.added_tokens_decoder
            .iter()
            .map(|(id, tok)| match id.parse::<u32>() {
                Ok(id) => Ok((id, tok.content.clone())),
                Err(_) => Err(TokenizeError::Invalid {
                    path: path.to_path_buf(),
                    message: format!("added_tokens_decoder: key {id:?} is not a token id"),
                }),
            })
            .collect()
    }
}

#[derive(Deserialize)]
struct AddedToken {
    content: String,
}

/// transformers writes special tokens either as plain strings or as
/// serialized `AddedToken` objects.
#[derive(Deserialize)]
#[serde(untagged)]
enum TokenSpec {
    Plain(String),
    Object { content: String },
}

impl TokenSpec {
    fn into_content(self) -> String {
        match self {
            TokenSpec::Plain(s) | TokenSpec::Object { content: s } => s,
        }
    }
}

fn read_file(path: &Path) -> Result<Vec<u8>, TokenizeError> {
    std::fs::read(path).map_err(|source| TokenizeError::Io {
        path: path.to_path_buf(),
        source,
    })
}

fn parse_json<T: for<'de> Deserialize<'de>>(path: &Path, bytes: &[u8]) -> Result<T, TokenizeError> {
    serde_json::from_slice(bytes).map_err(|e| TokenizeError::Invalid {
        path: path.to_path_buf(),
        message: format!("invalid JSON: {e}"),
    })
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::with_capacity(64), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}
