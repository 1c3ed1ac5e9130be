// Keeps cypris_test_support non-empty when tests/support/ has no sources.
