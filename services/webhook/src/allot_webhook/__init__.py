"""The validating and mutating admission webhooks (:mod:`allot_webhook.server`), the AdmissionReviews they accept
(:mod:`allot_webhook.review`), and the process serving them with its health and metrics server
(:mod:`allot_webhook.main`)."""
