//! This process's clock against DynamoDB's, on every request sent anyway:
//! an SDK interceptor reads each answer's HTTP `Date` header (whole
//! seconds) against the process's clock when the request left and when
//! the answer came ([`ClockReading`]).

use std::sync::Arc;

use aws_sdk_dynamodb::config::interceptors::{
    BeforeDeserializationInterceptorContextRef, BeforeTransmitInterceptorContextRef,
};
use aws_sdk_dynamodb::config::{ConfigBag, Intercept, RuntimeComponents};
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_types::config_bag::{Storable, StoreReplace};
use aws_smithy_types::date_time::{DateTime, Format};

use exactly_once_core::clock::{ClockReading, ClockWatch, now_ms};

/// An HTTP `Date` gives whole seconds.
const DATE_RESOLUTION_MS: u64 = 1000;

/// When the current attempt left, by this process's clock (epoch ms).
#[derive(Debug, Clone, Copy)]
struct SentAt(u64);

impl Storable for SentAt {
    type Storer = StoreReplace<Self>;
}

/// The interceptor reading every answer's `Date` into `watch`.
pub(crate) fn date_header(watch: Arc<ClockWatch>) -> impl Intercept + 'static {
    DateHeader(watch)
}

/// The SDK interceptor reading the `Date` of each answer.
#[derive(Debug)]
struct DateHeader(Arc<ClockWatch>);

impl Intercept for DateHeader {
    fn name(&self) -> &'static str {
        "ClockWatch"
    }

    fn read_before_transmit(
        &self,
        _context: &BeforeTransmitInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        cfg.interceptor_state().store_put(SentAt(now_ms()));
        Ok(())
    }

    fn read_after_transmit(
        &self,
        context: &BeforeDeserializationInterceptorContextRef<'_>,
        _components: &RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let received_ms = now_ms();
        let Some(SentAt(sent_ms)) = cfg.load::<SentAt>().copied() else {
            return Ok(());
        };
        // An answer without a readable `Date` tells nothing: no reading.
        let server = context.response().headers().get("date");
        if let Some(server_ms) = server.and_then(date_ms) {
            self.0.observe(ClockReading {
                sent_ms,
                received_ms,
                server_ms,
                resolution_ms: DATE_RESOLUTION_MS,
            });
        }
        Ok(())
    }
}

/// An HTTP date (`Sun, 29 Nov 2026 19:20:33 GMT`) as epoch ms.
fn date_ms(date: &str) -> Option<u64> {
    let time = DateTime::from_str(date, Format::HttpDate).ok()?;
    u64::try_from(time.to_millis().ok()?).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_http_date_reads_as_its_whole_second() {
        assert_eq!(
            date_ms("Sun, 29 Nov 2026 19:20:33 GMT"),
            Some(1_795_980_033_000)
        );
        assert_eq!(date_ms("yesterday"), None);
    }
}
