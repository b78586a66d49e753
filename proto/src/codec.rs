//! The protobuf codec of the todod service: tonic's, except that a request
//! that does not decode (invalid UTF-8 in a string field, a bad wire type) is
//! INVALID_ARGUMENT naming the field, not INTERNAL. The client stubs use it
//! too; prost only ever encodes valid messages, so they never see the
//! difference.
use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstCodec;

/// Named in `build.rs` (`codec_path`); generated code calls `default()`.
pub struct StrictCodec<T, U>(PhantomData<(T, U)>);

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec(PhantomData)
    }
}

impl<T, U> Codec for StrictCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = <ProstCodec<T, U> as Codec>::Encoder;
    type Decoder = StrictDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstCodec::<T, U>::raw_encoder(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(PhantomData)
    }
}

pub struct StrictDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf)
            .map(Some)
            .map_err(|e| Status::invalid_argument(field_path_message(&e.to_string())))
    }
}

/// prost names the fields innermost first:
/// "failed to decode Protobuf message: TodoItem.content: WriteTodosRequest.todos: <why>"
/// becomes "todos.content: <why>", outermost first like the handlers' fields.
pub fn field_path_message(text: &str) -> String {
    let rest = text
        .strip_prefix("failed to decode Protobuf message: ")
        .unwrap_or(text);
    let is_ident =
        |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    let (mut fields, mut tail) = (Vec::new(), rest);
    while let Some((head, after)) = tail.split_once(": ") {
        match head.split_once('.') {
            Some((message, field)) if is_ident(message) && is_ident(field) => {
                fields.push(field);
                tail = after;
            }
            _ => break,
        }
    }
    fields.reverse();
    if fields.is_empty() {
        format!("the request cannot be decoded: {tail}")
    } else {
        format!("{}: {tail}", fields.join("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_errors_name_the_field_outermost_first() {
        assert_eq!(
            field_path_message(
                "failed to decode Protobuf message: TodoItem.content: WriteTodosRequest.todos: \
                 invalid string value: data is not UTF-8 encoded"
            ),
            "todos.content: invalid string value: data is not UTF-8 encoded"
        );
        assert_eq!(
            field_path_message("failed to decode Protobuf message: invalid wire type value: 6"),
            "the request cannot be decoded: invalid wire type value: 6"
        );
    }
}
