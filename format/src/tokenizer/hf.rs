//! `tokenizer.json`, run by the Hugging Face `tokenizers` crate.

use std::path::Path;

use super::{Encoded, TokenizeError, Tokenizer};

pub(super) struct HfTokenizer {
    inner: tokenizers::Tokenizer,
    /// `get_vocab_size(true)` builds the whole added vocabulary map on every
    /// call, so it is computed once.
    vocab_size: usize,
}

impl HfTokenizer {
    pub(super) fn from_bytes(path: &Path, bytes: &[u8]) -> Result<Self, TokenizeError> {
        let inner =
            tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| TokenizeError::Invalid {
                path: path.to_path_buf(),
                message: e.to_string(),
            })?;
        // Python's `len(tokenizer)`, which is what Megatron's
        // preprocess_data.py sizes its dtype by.
        let vocab_size = inner.get_vocab_size(true);
        Ok(Self { inner, vocab_size })
    }
}

impl Tokenizer for HfTokenizer {
    fn encode(&self, text: &str, offsets: bool) -> Result<Encoded, TokenizeError> {
        // `add_special_tokens = false`: it only drives the post-processor
        // (BOS/EOS templates); added tokens in the text are matched anyway.
        // `encode` gives byte offsets (`encode_char_offsets` would give the
        // char offsets Python shows); `encode_fast` skips computing them.
        let result = if offsets {
            self.inner.encode(text, false)
        } else {
            self.inner.encode_fast(text, false)
        };
        let encoding = result.map_err(|e| TokenizeError::Encode(e.to_string()))?;
        Ok(Encoded {
            ids: encoding.get_ids().to_vec(),
            offsets: if offsets {
                encoding.get_offsets().to_vec()
            } else {
                Vec::new()
            },
        })
    }

    fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    fn token_id(&self, token: &str) -> Option<u32> {
        self.inner.token_to_id(token)
    }

    fn kind(&self) -> &'static str {
        "tokenizer.json"
    }
}
