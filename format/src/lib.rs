//! A model's own formats, which know no store and no phase: [`messages`]
//! (the one message model every prompt set is read into), [`chat_template`]
//! (rendered byte for byte as Hugging Face transformers renders it) and
//! [`tokenizer`] (a model directory's tokenizer, tokenizer.json or tiktoken),
//! and [`token_ids`] (a server's generated ids against a tokenization's).
pub mod chat_template;
pub mod messages;
pub mod token_ids;
pub mod tokenizer;
