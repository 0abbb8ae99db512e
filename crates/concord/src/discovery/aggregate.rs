//! `aggregate` discovery: several methods in order; the next is asked when one fails or
//! finds nothing (Akka's `AggregateServiceDiscovery`).

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::service_discovery::{DiscoveryError, Lookup, LookupFuture, Resolved, ServiceDiscovery};

/// Methods tried in order.
#[derive(Clone)]
pub struct AggregateServiceDiscovery {
    methods: Vec<Arc<dyn ServiceDiscovery>>,
}

impl AggregateServiceDiscovery {
    /// Tries `methods` in this order.
    pub fn new(methods: Vec<Arc<dyn ServiceDiscovery>>) -> Self {
        AggregateServiceDiscovery { methods }
    }
}

impl ServiceDiscovery for AggregateServiceDiscovery {
    /// The first non-empty result; if every method is empty, an empty result; if the last
    /// method failed and none found anything, its error.
    fn lookup<'a>(&'a self, lookup: &'a Lookup, timeout: Duration) -> LookupFuture<'a> {
        Box::pin(async move {
            let mut last: Result<Resolved, DiscoveryError> = Ok(Resolved {
                service_name: lookup.service_name.clone(),
                addresses: Vec::new(),
            });
            for (i, m) in self.methods.iter().enumerate() {
                match m.lookup(lookup, timeout).await {
                    Ok(r) if !r.addresses.is_empty() => return Ok(r),
                    Ok(r) => {
                        debug!(
                            method = i,
                            "discovery method found nothing, trying the next"
                        );
                        last = Ok(r);
                    }
                    Err(e) => {
                        debug!(method = i, error = %e, "discovery method failed, trying the next");
                        last = Err(e);
                    }
                }
            }
            last
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discovery::ResolvedTarget;

    struct Fixed(Result<Vec<ResolvedTarget>, ()>);

    impl ServiceDiscovery for Fixed {
        fn lookup<'a>(&'a self, lookup: &'a Lookup, _t: Duration) -> LookupFuture<'a> {
            let r = match &self.0 {
                Ok(v) => Ok(Resolved {
                    service_name: lookup.service_name.clone(),
                    addresses: v.clone(),
                }),
                Err(()) => Err(DiscoveryError::Failed {
                    service: lookup.service_name.clone(),
                    message: "boom".into(),
                }),
            };
            Box::pin(std::future::ready(r))
        }
    }

    fn t(host: &str) -> ResolvedTarget {
        ResolvedTarget::new(host, Some(8558))
    }

    async fn run(methods: Vec<Fixed>) -> Result<Resolved, DiscoveryError> {
        let agg = AggregateServiceDiscovery::new(
            methods
                .into_iter()
                .map(|m| Arc::new(m) as Arc<dyn ServiceDiscovery>)
                .collect(),
        );
        agg.lookup(&Lookup::new("svc"), Duration::from_secs(1))
            .await
    }

    #[tokio::test]
    async fn next_method_on_failure_or_empty_result() {
        let r = run(vec![
            Fixed(Err(())),
            Fixed(Ok(vec![])),
            Fixed(Ok(vec![t("10.0.0.1")])),
            Fixed(Ok(vec![t("10.0.0.2")])),
        ])
        .await
        .unwrap();
        assert_eq!(r.addresses, vec![t("10.0.0.1")]);
    }

    #[tokio::test]
    async fn all_empty_is_empty_and_last_failure_is_reported() {
        assert!(run(vec![Fixed(Ok(vec![])), Fixed(Ok(vec![]))])
            .await
            .unwrap()
            .addresses
            .is_empty());
        assert!(run(vec![Fixed(Ok(vec![])), Fixed(Err(()))]).await.is_err());
    }
}
