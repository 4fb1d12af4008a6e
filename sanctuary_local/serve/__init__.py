"""``sanctuary-local serve``: a local web page and JSON API where an analyst checks claims
against a corpus index of their own documents.

- ``app``: settings, the Starlette app and its lifetime under uvicorn;
- ``routes``: the pages; ``api``: the JSON API; ``deletion``: deleting a check from either;
- ``paging``: which checks a list shows, a page at a time (the history, ``GET /api/checks``);
- ``stopping``: what the server says, ends and exits with when it is stopped;
- ``queue``: the bounded check queue and its one worker thread;
- ``jobs``: the checks on disk under ``--data`` (history, and what a restart resumes);
- ``resident``: the models, loaded once per process and reused by every check;
- ``security``: body cap, Host and Origin checks, CSP, bearer token and login session, CSRF, corpus paths;
- ``sessions``: the page's login sessions under ``--data``; ``throttle``: token guesses slowed, then refused;
- ``connections``: uvicorn's HTTP protocol with a header timeout and a cap on open connections;
- ``rendering``: what a page or the API shows of a check, and the Jinja2 templates.
"""
