//! The protobuf codec of the gRPC services: prost's, except that a message
//! that cannot be decoded — a string field that is not UTF-8, a truncated or
//! malformed message — is `INVALID_ARGUMENT` naming the field (prost's error
//! says `Message.field: ...`), not `INTERNAL`: it is the sender's fault, and
//! the reply says what to fix.

use prost::Message;
use std::marker::PhantomData;
use tonic::codec::{Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstCodec;

/// [`ProstCodec`] with decode errors as `INVALID_ARGUMENT`.
pub struct StrictCodec<T, U>(ProstCodec<T, U>);

impl<T, U> Default for StrictCodec<T, U> {
    fn default() -> Self {
        StrictCodec(ProstCodec::default())
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
        self.0.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        StrictDecoder(PhantomData)
    }
}

/// Decodes `U`; a bad message is `INVALID_ARGUMENT`.
pub struct StrictDecoder<U>(PhantomData<U>);

impl<U: Message + Default> Decoder for StrictDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf)
            .map(Some)
            .map_err(|e| Status::invalid_argument(format!("the message cannot be decoded: {e}")))
    }
}
