"""The become tests' users (tests/become/conftest.py) for the corpus's become playbook: dfpsudo logs in with the
harness's key and has NOPASSWD sudo; dfpbtarget is a become_user target."""

from tests.become.conftest import become_users  # noqa: F401 - a fixture, shared with tests/become
