"""The local development environment: private zones, the dev broker, Airflow."""
