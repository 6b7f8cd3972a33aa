"""Alias moves: the inputs of the alias decision read from the database (``repository``,
``evidence``), the decision asked and recorded (``service``), and its refusals as HTTP answers
(``refusals``). The aliases domain (endpoints, approvals), TUF proposals (``trust``) and the
OCI tag door all move aliases through here; it imports none of them."""
