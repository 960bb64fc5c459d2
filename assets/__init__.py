"""This code location's assets: ``assets.location`` lists them (the task backlog of every
realm with its checks, and the leak report with its check) for ``definitions.py``.
"""
