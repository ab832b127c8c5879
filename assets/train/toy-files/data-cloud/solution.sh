#!/bin/bash
echo cloud > /app/data.txt
